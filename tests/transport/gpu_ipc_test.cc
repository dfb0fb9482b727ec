// CUDA memory through the inproc and shm transports (issue #6): device regions whose keys carry a
// CUDA IPC handle (shm) or the device pointer itself (inproc, one address space), and write()
// into and out of device memory with cudaMemcpy.
//
// Without a GPU (this development machine, CI), the device-free parts run: the key format (every
// malformed key is a clear error, a host key is never read as a device key), the copy and import
// decisions, the process token. The device tests print why they skip.
//
// With a GPU (tests/gpu/run.sh), the device tests move data between two ranks' device buffers:
// inproc (threads of one process), shm between two processes (CUDA IPC), and shm between two
// transports of one process (the owner's pointer; cudaIpcOpenMemHandle refuses own handles).
//
// CUDA cannot be used in a child forked after its parent initialized it, so everything that
// touches CUDA, the GPU probe included, runs in forked children; the parent never initializes
// CUDA. Children report failures on stderr and through their exit code.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "runtime/file_store.h"
#include "runtime/gpu.h"
#include "runtime/store.h"
#include "tests/harness/process_world.h"
#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/cuda_ipc/cuda_ipc_region.h"
#include "transport/registry.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"

namespace eagercomm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// ---- device-free: the key format ----

CudaIpcKey sample_key() {
  CudaIpcKey k;
  k.owner = 3;
  k.bytes = 1 << 20;
  k.offset = 4096;
  k.process = 0x1122334455667788ull;
  k.address = 0x7f0000001000ull;
  for (size_t i = 0; i < k.handle.size(); ++i) k.handle[i] = static_cast<uint8_t>(i * 7 + 1);
  return k;
}

void expect_refused(const std::vector<uint8_t>& blob, const std::string& words) {
  const Status s = CudaIpcKey::unpack(blob, "remote key from rank 3").status();
  EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s.to_string();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("remote key from rank 3"), std::string::npos) << s.to_string();
}

TEST(CudaIpcKey, RoundTripsEveryField) {
  const CudaIpcKey k = sample_key();
  const std::vector<uint8_t> blob = k.pack();
  ASSERT_EQ(blob.size(), kCudaIpcKeyBytes);
  EXPECT_TRUE(CudaIpcKey::claims(blob));
  auto back = CudaIpcKey::unpack(blob, "key");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value().owner, k.owner);
  EXPECT_EQ(back.value().bytes, k.bytes);
  EXPECT_EQ(back.value().offset, k.offset);
  EXPECT_EQ(back.value().process, k.process);
  EXPECT_EQ(back.value().address, k.address);
  EXPECT_EQ(back.value().handle, k.handle);
}

TEST(CudaIpcKey, MalformedKeysAreClearErrors) {
  const std::vector<uint8_t> good = sample_key().pack();
  expect_refused({}, "has 0 bytes");
  expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + 50), "has 50 bytes");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_refused(longer, "has 109 bytes");
  std::vector<uint8_t> magic = good;
  magic[0] ^= 0xff;
  expect_refused(magic, "not a CUDA IPC key");
  std::vector<uint8_t> version = good;
  version[4] = 9;
  expect_refused(version, "version 9");
  std::vector<uint8_t> reserved = good;
  reserved[7] = 1;
  expect_refused(reserved, "reserved");
  auto edit = [&](void (*change)(CudaIpcKey&)) {
    CudaIpcKey k = sample_key();
    change(k);
    return k.pack();
  };
  expect_refused(edit([](CudaIpcKey& k) { k.owner = -2; }), "owner rank -2");
  expect_refused(edit([](CudaIpcKey& k) { k.bytes = kCudaIpcMaxBytes + 1; }), "at most");
  expect_refused(edit([](CudaIpcKey& k) { k.offset = ~uint64_t{0}; }), "at most");
  expect_refused(edit([](CudaIpcKey& k) { k.address = ~uint64_t{0} - 10; }), "wraps around");
}

// The kind byte and the magic keep host and device keys apart, both ways.
TEST(CudaIpcKey, HostKeysAreNeverDeviceKeys) {
  std::vector<uint8_t> host_kind = sample_key().pack();
  host_kind[5] = static_cast<uint8_t>(MemoryKind::kHost);
  expect_refused(host_kind, "not cuda");
  // An shm host key is not claimed by the device format, and its decoder refuses a device key.
  const ShmKey host{"/eagercomm-j-0123456789abcdef-3-1", 4096, 3, ShmSegmentKind::kData, 42};
  const std::vector<uint8_t> host_blob = host.pack();
  EXPECT_FALSE(CudaIpcKey::claims(host_blob));
  EXPECT_EQ(CudaIpcKey::unpack(host_blob, "key").status().code(), StatusCode::kProtocolError);
  const Status s = ShmKey::unpack(sample_key().pack(), "key").status();
  EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s.to_string();
  EXPECT_NE(s.message().find("not an shm key"), std::string::npos) << s.to_string();
  // Garbage of the right length that happens to start like a device key is still checked.
  std::vector<uint8_t> garbage(kCudaIpcKeyBytes, 0xee);
  std::memcpy(garbage.data(), sample_key().pack().data(), 4);
  EXPECT_TRUE(CudaIpcKey::claims(garbage));
  expect_refused(garbage, "version 238");
}

// ---- device-free: the decisions ----

TEST(CudaIpcDecisions, CudaMemcpyWhenEitherSideIsDeviceMemory) {
  EXPECT_EQ(write_copy_for(MemoryKind::kHost, MemoryKind::kHost), WriteCopy::kMemcpy);
  EXPECT_EQ(write_copy_for(MemoryKind::kHost, MemoryKind::kCuda), WriteCopy::kCudaMemcpy);
  EXPECT_EQ(write_copy_for(MemoryKind::kCuda, MemoryKind::kHost), WriteCopy::kCudaMemcpy);
  EXPECT_EQ(write_copy_for(MemoryKind::kCuda, MemoryKind::kCuda), WriteCopy::kCudaMemcpy);
  // Host to host is a plain memcpy, with or without a GPU; nothing to copy asks CUDA nothing.
  const char src[] = "eagercomm";
  char dst[sizeof(src)] = {};
  ASSERT_TRUE(copy_for_write(dst, MemoryKind::kHost, src, MemoryKind::kHost, sizeof(src)).ok());
  EXPECT_STREQ(dst, src);
  EXPECT_TRUE(copy_for_write(nullptr, MemoryKind::kCuda, nullptr, MemoryKind::kCuda, 0).ok());
}

TEST(CudaIpcDecisions, OwnProcessKeysUseThePointerOthersOpenTheHandle) {
  CudaIpcKey k = sample_key();
  k.process = cuda_ipc_process_token();
  EXPECT_EQ(cuda_import_path(k, cuda_ipc_process_token()), CudaImportPath::kSameProcess);
  k.process ^= 1;
  EXPECT_EQ(cuda_import_path(k, cuda_ipc_process_token()), CudaImportPath::kIpc);
}

// A forked child is another process (its handles must be opened, not its pointers used), although
// it inherits everything of its parent's memory.
TEST(CudaIpcDecisions, ProcessTokenIsStableHereAndDiffersInAChild) {
  const uint64_t mine = cuda_ipc_process_token();
  EXPECT_EQ(cuda_ipc_process_token(), mine);
  const std::vector<RankExit> child = run_process_world(1, [](int) {
    const uint64_t token = cuda_ipc_process_token();
    CHILD_CHECK(report_to_parent({reinterpret_cast<const char*>(&token), sizeof(token)}),
                "report: %s", strerror(errno));
  });
  ASSERT_TRUE(all_ok(child));
  ASSERT_EQ(child[0].report.size(), sizeof(uint64_t));
  uint64_t token = mine;
  std::memcpy(&token, child[0].report.data(), sizeof(token));
  EXPECT_NE(token, mine);
}

// ---- with a GPU: data between device buffers ----

// Empty when this machine has a GPU, else why not; asked once, in a child.
const std::string& no_gpu_reason() {
  static const std::string reason = [] {
    int fds[2];
    if (pipe(fds) != 0) return std::string("pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const Status s = cuda_memory_available("gpu_ipc_test");
      const std::string why = s.ok() ? "" : s.message();
      _exit(write(fds[1], why.data(), why.size()) == static_cast<ssize_t>(why.size()) ? 0 : 1);
    }
    close(fds[1]);
    std::string why;
    char buf[512];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof(buf))) > 0) why.append(buf, static_cast<size_t>(got));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) return std::string("GPU probe failed");
    return why;
  }();
  return reason;
}

#define SKIP_WITHOUT_GPU()                                                       \
  do {                                                                           \
    if (!no_gpu_reason().empty()) GTEST_SKIP() << "no GPU: " << no_gpu_reason(); \
  } while (0)

constexpr size_t kBytes = 1 << 20;

std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> p(bytes);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(i * 31 + seed);
  return p;
}

std::vector<uint8_t> read_device(const void* p, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  CHILD_OK(gpu::copy(out.data(), p, bytes));
  return out;
}

// Polls `t` until a notification with `tag` from `peer` arrives (other completions are dropped).
void await_tag(Transport& t, int peer, uint32_t tag) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  TransportCompletion c[16];
  for (;;) {
    const size_t n = t.poll(c);
    for (size_t i = 0; i < n; ++i) {
      CHILD_CHECK(c[i].kind != TransportCompletion::Kind::kPeerError, "peer error from %d",
                  c[i].peer);
      if (c[i].kind == TransportCompletion::Kind::kNotify && c[i].peer == peer && c[i].tag == tag) {
        return;
      }
    }
    CHILD_CHECK(std::chrono::steady_clock::now() < deadline, "no tag %u from rank %d", tag, peer);
    if (n == 0) t.wait(milliseconds(10));
  }
}

// Writes `bytes` of `src` to `dst` with `tag`, retrying while the transport is busy.
void write_all(Transport& t, const MemoryRegion& src, size_t src_off, const RemoteRegion& dst,
               size_t dst_off, size_t bytes, uint32_t tag) {
  for (;;) {
    const Status s = t.write(src, src_off, dst, dst_off, bytes, tag, tag);
    if (s.code() != StatusCode::kBusy) {
      CHILD_OK(s);
      return;
    }
    TransportCompletion c[16];
    t.poll(c);
  }
}

// Rank 0 of `t0` writes into rank 1's (`t1`) device region from host and from device memory, and
// rank 1 writes back into rank 0's host region from device memory. Both transports in this
// process (inproc, or shm with the owner's pointer).
void exchange_in_one_process(Transport& t0, Transport& t1) {
  CHILD_VALUE(dst, t1.allocate(kBytes, MemoryKind::kCuda));
  CHILD_CHECK(dst->kind() == MemoryKind::kCuda, "kind");
  CHILD_CHECK(read_device(dst->data(), kBytes) == std::vector<uint8_t>(kBytes, 0), "not zeroed");
  CHILD_VALUE(remote, t0.import_region(1, dst->remote_key()));
  CHILD_CHECK(t0.mapped_address(*remote) == nullptr, "device memory handed out as mapped");

  // host -> device
  const std::vector<uint8_t> a = pattern(kBytes, 1);
  CHILD_VALUE(host_src, t0.allocate(kBytes, MemoryKind::kHost));
  std::memcpy(host_src->data(), a.data(), kBytes);
  write_all(t0, *host_src, 0, *remote, 0, kBytes, 1);
  await_tag(t1, 0, 1);
  CHILD_CHECK(read_device(dst->data(), kBytes) == a, "host -> device bytes differ");

  // device -> device, at offsets, from a registered part of a larger device buffer
  const std::vector<uint8_t> b = pattern(kBytes, 2);
  CHILD_VALUE(buffer, gpu::DeviceBuffer::allocate(2 * kBytes));
  CHILD_OK(gpu::copy(static_cast<uint8_t*>(buffer.data()) + 4096, b.data(), kBytes));
  CHILD_VALUE(dev_src, t0.register_memory(static_cast<uint8_t*>(buffer.data()) + 4096, kBytes,
                                          MemoryKind::kCuda));
  write_all(t0, *dev_src, 100, *remote, 200, kBytes - 300, 2);
  await_tag(t1, 0, 2);
  const std::vector<uint8_t> got = read_device(dst->data(), kBytes);
  CHILD_CHECK(std::equal(got.begin() + 200, got.end() - 100, b.begin() + 100),
              "device -> device bytes differ");
  CHILD_CHECK(std::equal(got.begin(), got.begin() + 200, a.begin()), "bytes before overwritten");

  // device -> host (rank 1's device region into rank 0's host region)
  CHILD_VALUE(back, t0.allocate(kBytes, MemoryKind::kHost));
  CHILD_VALUE(back_remote, t1.import_region(0, back->remote_key()));
  write_all(t1, *dst, 0, *back_remote, 0, kBytes, 3);
  await_tag(t0, 1, 3);
  CHILD_CHECK(std::memcmp(back->data(), got.data(), kBytes) == 0, "device -> host bytes differ");
}

TEST(GpuIpcInproc, DeviceBuffersMoveBetweenRanks) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(all_ok(run_process_world(1, [](int) {
    Config config;
    HashStore store;
    std::unique_ptr<Transport> t[2];
    std::thread second([&] {
      CHILD_VALUE(made, create_transport("inproc", TransportParams{1, 2, &config, &store, "g"}));
      t[1] = std::move(made);
    });
    CHILD_VALUE(made, create_transport("inproc", TransportParams{0, 2, &config, &store, "g"}));
    t[0] = std::move(made);
    second.join();
    for (int r = 0; r < 2; ++r) {
      for (int p = 0; p < 2; ++p) CHILD_OK(t[r]->connect(p, t[p]->local_address()));
    }
    exchange_in_one_process(*t[0], *t[1]);

    // Bad input with a GPU: a host pointer as device memory, a device pointer as host memory
    // (checked once this transport holds device memory), a range past its allocation.
    std::vector<uint8_t> host(64);
    const Status host_as_cuda =
        t[0]->register_memory(host.data(), host.size(), MemoryKind::kCuda).status();
    CHILD_CHECK(host_as_cuda.code() == StatusCode::kInvalidArgument, "%s",
                host_as_cuda.to_string().c_str());
    CHILD_VALUE(dev, gpu::DeviceBuffer::allocate(4096));
    const Status cuda_as_host = t[0]->register_memory(dev.data(), 4096, MemoryKind::kHost).status();
    CHILD_CHECK(cuda_as_host.code() == StatusCode::kInvalidArgument &&
                    cuda_as_host.message().find("device memory") != std::string::npos,
                "%s", cuda_as_host.to_string().c_str());
    const Status past =
        t[0]->register_memory(dev.data(), size_t{64} << 20, MemoryKind::kCuda).status();
    CHILD_CHECK(past.code() == StatusCode::kInvalidArgument &&
                    past.message().find("run past") != std::string::npos,
                "%s", past.to_string().c_str());
    // The peer's device memory stays alive while an import of it does.
    CHILD_VALUE(owned, t[1]->allocate(4096, MemoryKind::kCuda));
    CHILD_VALUE(remote, t[0]->import_region(1, owned->remote_key()));
    owned.reset();
    CHILD_VALUE(src, t[0]->register_memory(dev.data(), 4096, MemoryKind::kCuda));
    write_all(*t[0], *src, 0, *remote, 0, 4096, 9);
  })));
}

TEST(GpuIpcShm, DeviceBuffersMoveBetweenTwoTransportsOfOneProcess) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(all_ok(run_process_world(1, [](int) {
    Config config;
    config.job_id = "gpuipc-" + std::to_string(getpid());
    HashStore store;
    std::unique_ptr<Transport> t[2];
    for (int r = 0; r < 2; ++r) {
      CHILD_VALUE(made, create_shm_transport(TransportParams{r, 2, &config, &store, "g"}));
      t[r] = std::move(made);
    }
    for (int r = 0; r < 2; ++r) {
      for (int p = 0; p < 2; ++p) CHILD_OK(t[r]->connect(p, t[p]->local_address()));
    }
    exchange_in_one_process(*t[0], *t[1]);
  })));
}

// Two processes: rank 1's device region is reached through its CUDA IPC handle.
TEST(GpuIpcShm, DeviceBuffersMoveBetweenProcesses) {
  SKIP_WITHOUT_GPU();
  char tmpl[] = "/tmp/eagercomm-gpuipc-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string job = "gpuipc-" + std::to_string(getpid());
  EXPECT_TRUE(all_ok(run_process_world(2, [&](int rank) {
    Config config;
    config.job_id = job;
    CHILD_VALUE(store, FileStore::open(dir));
    CHILD_VALUE(t, create_shm_transport(TransportParams{rank, 2, &config, store.get(), "g"}));
    CHILD_OK(store->set("addr/" + std::to_string(rank), t->local_address()));
    const int peer = 1 - rank;
    CHILD_VALUE(peer_addr, store->get("addr/" + std::to_string(peer), seconds(30)));
    for (int p = 0; p < 2; ++p) {
      CHILD_OK(t->connect(p, p == rank ? t->local_address() : peer_addr));
    }
    // Each rank: a device region (allocate) and a host region for the answer.
    CHILD_VALUE(dev, t->allocate(kBytes, MemoryKind::kCuda));
    CHILD_VALUE(host, t->allocate(kBytes, MemoryKind::kHost));
    CHILD_OK(store->set("dev/" + std::to_string(rank), dev->remote_key()));
    CHILD_OK(store->set("host/" + std::to_string(rank), host->remote_key()));
    CHILD_VALUE(peer_dev_key, store->get("dev/" + std::to_string(peer), seconds(30)));
    CHILD_VALUE(peer_host_key, store->get("host/" + std::to_string(peer), seconds(30)));
    CHILD_VALUE(key, CudaIpcKey::unpack(peer_dev_key, "peer key"));
    CHILD_CHECK(cuda_import_path(key, cuda_ipc_process_token()) == CudaImportPath::kIpc,
                "a peer process's key taken for this process's");
    // Every rank arrives at `name` before any goes on.
    auto barrier = [&](const std::string& name) {
      CHILD_OK(store->add(name, 1).status());
      const auto deadline = std::chrono::steady_clock::now() + seconds(30);
      for (;;) {
        CHILD_VALUE(n, store->add(name, 0));
        if (n == 2) return;
        CHILD_CHECK(std::chrono::steady_clock::now() < deadline, "barrier %s", name.c_str());
        std::this_thread::sleep_for(milliseconds(2));
      }
    };
    CHILD_VALUE(peer_dev, t->import_region(peer, peer_dev_key));
    CHILD_CHECK(t->mapped_address(*peer_dev) == nullptr, "device memory handed out as mapped");
    {
      // A second import shares the opened allocation; dropping it leaves the first usable.
      CHILD_VALUE(again, t->import_region(peer, peer_dev_key));
    }
    CHILD_VALUE(peer_host, t->import_region(peer, peer_host_key));

    if (rank == 0) {
      // host -> peer device, then device -> peer device at an offset.
      const std::vector<uint8_t> a = pattern(kBytes, 5);
      std::memcpy(host->data(), a.data(), kBytes);
      write_all(*t, *host, 0, *peer_dev, 0, kBytes, 1);
      const std::vector<uint8_t> b = pattern(kBytes / 2, 6);
      CHILD_OK(gpu::copy(dev->data(), b.data(), b.size()));
      write_all(*t, *dev, 0, *peer_dev, kBytes / 2, kBytes / 2, 2);
      // Rank 1 sends its device region back into this rank's host region.
      await_tag(*t, 1, 3);
      std::vector<uint8_t> expect = a;
      std::copy(b.begin(), b.end(), expect.begin() + kBytes / 2);
      CHILD_CHECK(std::memcmp(host->data(), expect.data(), kBytes) == 0,
                  "the round trip through rank 1's device memory changed the bytes");
    } else {
      await_tag(*t, 0, 1);
      await_tag(*t, 0, 2);
      const std::vector<uint8_t> got = read_device(dev->data(), kBytes);
      const std::vector<uint8_t> a = pattern(kBytes, 5);
      const std::vector<uint8_t> b = pattern(kBytes / 2, 6);
      CHILD_CHECK(std::equal(got.begin(), got.begin() + kBytes / 2, a.begin()), "host -> device");
      CHILD_CHECK(std::equal(got.begin() + kBytes / 2, got.end(), b.begin()), "device -> device");
      write_all(*t, *dev, 0, *peer_host, 0, kBytes, 3);  // device -> peer host
    }
    // Imports go before the memory they name: the owner frees its regions only after every
    // peer closed its mappings of them.
    barrier("done");
    peer_dev.reset();
    peer_host.reset();
    barrier("released");
  })));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eagercomm::test
