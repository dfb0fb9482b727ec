#include "transport/cuda_ipc/cuda_ipc_key.h"

#include <unistd.h>

#include <cstring>

#include "runtime/memory.h"
#include "transport/shm/shm_segment.h"

namespace eagercomm {
namespace {

constexpr uint32_t kMagic = 0x49474345;  // "ECGI"
constexpr uint8_t kVersion = 1;

// Field offsets in the packed key.
constexpr size_t kAtMagic = 0, kAtVersion = 4, kAtKind = 5, kAtZero = 6, kAtOwner = 8,
                 kAtBytes = 12, kAtOffset = 20, kAtProcess = 28, kAtAddress = 36, kAtHandle = 44;
static_assert(kAtHandle + std::tuple_size_v<gpu::IpcHandle> == kCudaIpcKeyBytes);

template <typename T>
void store(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(v));
}
template <typename T>
T load(std::span<const uint8_t> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(v));
  return v;
}

}  // namespace

std::vector<uint8_t> CudaIpcKey::pack() const {
  std::vector<uint8_t> out(kCudaIpcKeyBytes, 0);
  store(out, kAtMagic, kMagic);
  store(out, kAtVersion, kVersion);
  store(out, kAtKind, static_cast<uint8_t>(MemoryKind::kCuda));
  store(out, kAtOwner, owner);
  store(out, kAtBytes, bytes);
  store(out, kAtOffset, offset);
  store(out, kAtProcess, process);
  store(out, kAtAddress, address);
  std::memcpy(out.data() + kAtHandle, handle.data(), handle.size());
  return out;
}

bool CudaIpcKey::claims(std::span<const uint8_t> blob) {
  return blob.size() >= sizeof(kMagic) && load<uint32_t>(blob, kAtMagic) == kMagic;
}

Result<CudaIpcKey> CudaIpcKey::unpack(std::span<const uint8_t> blob, const char* what) {
  if (blob.size() != kCudaIpcKeyBytes) {
    return make_status(StatusCode::kProtocolError, "shm: %s has %zu bytes; a CUDA IPC key has %zu",
                       what, blob.size(), kCudaIpcKeyBytes);
  }
  if (!claims(blob)) {
    return make_status(StatusCode::kProtocolError, "shm: %s is not a CUDA IPC key (magic 0x%08x)",
                       what, load<uint32_t>(blob, kAtMagic));
  }
  if (const auto v = load<uint8_t>(blob, kAtVersion); v != kVersion) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s is a CUDA IPC key of version %u; this build reads version %u", what,
                       v, kVersion);
  }
  if (const auto kind = load<uint8_t>(blob, kAtKind);
      kind != static_cast<uint8_t>(MemoryKind::kCuda)) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s says memory kind %u, not cuda (%u): not a device region's key",
                       what, kind, static_cast<unsigned>(MemoryKind::kCuda));
  }
  if (load<uint16_t>(blob, kAtZero) != 0) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s has nonzero reserved bytes (a newer format?)", what);
  }
  CudaIpcKey key;
  key.owner = load<int32_t>(blob, kAtOwner);
  key.bytes = load<uint64_t>(blob, kAtBytes);
  key.offset = load<uint64_t>(blob, kAtOffset);
  key.process = load<uint64_t>(blob, kAtProcess);
  key.address = load<uint64_t>(blob, kAtAddress);
  std::memcpy(key.handle.data(), blob.data() + kAtHandle, key.handle.size());
  if (key.owner < 0) {
    return make_status(StatusCode::kProtocolError, "shm: %s names owner rank %d", what, key.owner);
  }
  // Both bounded, so offset + bytes and address + bytes below cannot wrap.
  if (key.bytes > kCudaIpcMaxBytes || key.offset > kCudaIpcMaxBytes) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s names %llu bytes at offset %llu; each may be at most %llu", what,
                       static_cast<unsigned long long>(key.bytes),
                       static_cast<unsigned long long>(key.offset),
                       static_cast<unsigned long long>(kCudaIpcMaxBytes));
  }
  if (key.address > UINT64_MAX - key.bytes) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s names a region that wraps around the address space", what);
  }
  return key;
}

uint64_t cuda_ipc_process_token() {
  // A random base per process image, mixed with the pid: a forked child inherits the base but not
  // the pid, and processes with equal pids (other pid namespaces) have different bases.
  static const uint64_t base = shm_random_u64();
  uint64_t x = base ^ (static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 31;  // splitmix64's finalizer: no simple relation between neighbouring pids' tokens
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  return x;
}

}  // namespace eagercomm
