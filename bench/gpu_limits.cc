// gpu-limits: the physical copy limits of this machine's GPU, for judging the device collectives
// against them (issue 19: "within 2x of the on-device floor"): pinned host -> device, device ->
// pinned host and device -> device bandwidth, each the median of --reps timed copies of --bytes on
// one stream. Prints one JSON object; without a GPU, {"error": ...} and exit status 2.
//
// usage: gpu-limits [--bytes N] [--reps N]      (defaults: 64 MiB, 20)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/gpu.h"

namespace eagercomm {
namespace {

// The median of `reps` copies of `bytes` from src to dst on `stream`, in GB/s (1e9 bytes/s).
Result<double> median_gbps(void* dst, const void* src, size_t bytes, int reps,
                           const gpu::Stream& stream) {
  std::vector<double> gbps;
  for (int i = -2; i < reps; ++i) {  // two untimed warm-up copies
    const auto t0 = std::chrono::steady_clock::now();
    EC_RETURN_IF_ERROR(gpu::copy_async(dst, src, bytes, stream.handle()));
    EC_RETURN_IF_ERROR(stream.synchronize());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 0) gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

int run(size_t bytes, int reps) {
  const gpu::Inventory inv = gpu::query();
  if (inv.devices.empty()) {
    std::printf("{\"error\": \"no GPU: %s\"}\n", inv.reason.c_str());
    return 2;
  }
  auto device = gpu::current_device();
  auto stream = device.ok() ? gpu::Stream::create(*device) : Result<gpu::Stream>(device.status());
  auto pinned = gpu::PinnedBuffer::allocate(bytes);
  auto a = gpu::DeviceBuffer::allocate(bytes);
  auto b = gpu::DeviceBuffer::allocate(bytes);
  for (const Status& s : {stream.status(), pinned.status(), a.status(), b.status()}) {
    if (!s.ok()) {
      std::printf("{\"error\": \"%s\"}\n", s.to_string().c_str());
      return 1;
    }
  }
  std::memset(pinned.value().data(), 1, bytes);
  auto h2d = median_gbps(a.value().data(), pinned.value().data(), bytes, reps, stream.value());
  auto d2h = median_gbps(pinned.value().data(), a.value().data(), bytes, reps, stream.value());
  auto d2d = median_gbps(b.value().data(), a.value().data(), bytes, reps, stream.value());
  for (const Status& s : {h2d.status(), d2h.status(), d2d.status()}) {
    if (!s.ok()) {
      std::printf("{\"error\": \"%s\"}\n", s.to_string().c_str());
      return 1;
    }
  }
  // D2D moves the bytes twice through device memory (read and write): its copy rate is what an
  // on-device reduction that reads n and writes n is bounded by.
  std::printf(
      "{\"gpu\": \"%s\", \"bytes\": %zu, \"reps\": %d, \"pinned_h2d_gbps\": %.2f, "
      "\"pinned_d2h_gbps\": %.2f, \"d2d_copy_gbps\": %.2f}\n",
      inv.devices[static_cast<size_t>(*device)].name.c_str(), bytes, reps, *h2d, *d2h, *d2d);
  return 0;
}

}  // namespace
}  // namespace eagercomm

int main(int argc, char** argv) {
  size_t bytes = size_t{64} << 20;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--bytes" || arg == "--reps") && i + 1 < argc) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(argv[++i], &end, 10);
      if (*end != '\0' || v == 0) {
        std::fprintf(stderr, "gpu-limits: %s wants a positive integer, not '%s'\n", arg.c_str(),
                     argv[i]);
        return 2;
      }
      if (arg == "--bytes") bytes = v;
      if (arg == "--reps") reps = static_cast<int>(std::min<unsigned long long>(v, 10000));
    } else {
      std::fprintf(stderr, "usage: gpu-limits [--bytes N] [--reps N]\n");
      return 2;
    }
  }
  return eagercomm::run(bytes, reps);
}
