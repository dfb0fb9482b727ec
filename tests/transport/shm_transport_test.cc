// The shm backend's own behaviour between forked processes that meet through a FileStore (and
// between transports of one process): the Mailbox on top, segment naming and cleanup (also past
// a stale segment of an earlier run, and without a job id), bad creation parameters, keys,
// peers, addresses and kinds in shm's terms, wait()'s bounded sleeps, and peers that corrupt the
// shared rings. Plus a ping-pong and bandwidth measurement (printed). What every backend
// promises (writes and notifications, back-pressure, lost wake-ups, mapped stores, close) is
// tests/transport/transport_contract_test.cc.
//
// Children report failures on stderr and through their exit code; the parent checks every exit
// code and that no /dev/shm/eagercomm-<job>-* is left behind.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
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
#include "transport/mailbox.h"
#include "transport/registry.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"

namespace eagercomm::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kSlowdown = 8;  // sanitizer builds: fewer iterations, same coverage
#else
constexpr int kSlowdown = 1;
#endif

// Every name in /dev/shm that starts with eagercomm-<job>-.
std::vector<std::string> leftover_segments(const std::string& job) {
  std::vector<std::string> out;
  const std::string prefix = "eagercomm-" + job + "-";
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::string_view(e->d_name).starts_with(prefix)) out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

bool shm_exists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

std::string unique_job() {
  static int counter = 0;
  return "shmtest-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

std::string make_temp_dir() {
  char tmpl[] = "/tmp/eagercomm-shmtest-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "";
}

// What a child rank works with.
struct Ctx {
  int rank = 0;
  int size = 0;
  std::string scope;
  Config config;
  std::unique_ptr<FileStore> store;
  std::unique_ptr<Transport> t;

  std::string key(const std::string& name, int r) const {
    return scope + "/test/" + name + "/" + std::to_string(r);
  }
  void publish(const std::string& name, const Bytes& value) {
    CHILD_OK(store->set(key(name, rank), value));
  }
  Bytes fetch(const std::string& name, int r) {
    auto v = store->get(key(name, r), seconds(30));
    CHILD_CHECK(v.ok(), "%s", v.status().to_string().c_str());
    return std::move(v).value();
  }
  // Every rank arrives before any leaves. `pump` runs while waiting (keeps traffic moving).
  void barrier(const std::string& name, const std::function<void()>& pump = {}) {
    const std::string k = scope + "/test/barrier/" + name;
    auto n = store->add(k, 1);
    CHILD_CHECK(n.ok(), "%s", n.status().to_string().c_str());
    const auto deadline = Clock::now() + seconds(30);
    while (n.value() < size) {
      CHILD_CHECK(Clock::now() < deadline, "barrier %s: %lld of %d arrived", name.c_str(),
                  static_cast<long long>(n.value()), size);
      if (pump) {
        pump();
      } else {
        std::this_thread::sleep_for(milliseconds(1));
      }
      n = store->add(k, 0);
      CHILD_CHECK(n.ok(), "%s", n.status().to_string().c_str());
    }
  }
  // Publishes this rank's address and connects to every peer.
  void connect_all() {
    publish("addr", t->local_address());
    for (int p = 0; p < size; ++p) CHILD_OK(t->connect(p, fetch("addr", p)));
  }
};

struct RunOptions {
  std::string job;            // empty: a fresh unique one
  bool empty_job_id = false;  // leave EAGERCOMM_JOB_ID empty (rank 0 picks one)
  std::string scope = "shmtest";
  uint32_t slots = 8;
};

struct RunResult {
  std::string job;    // the job id the segments were named with
  std::string store;  // the FileStore directory
};

// Forks `size` ranks that each create an shm transport and run `body`; checks their exit codes
// and that no segment of the job is left (tests/harness/process_world.h reports each rank).
RunResult run_ranks(int size, const std::function<void(Ctx&)>& body, RunOptions opt = {}) {
  RunResult result;
  result.job = opt.job.empty() ? unique_job() : opt.job;
  result.store = make_temp_dir();
  EXPECT_FALSE(result.store.empty());
  const bool failed = !all_ok(run_process_world(size, [&](int r) {
    Ctx ctx;
    ctx.rank = r;
    ctx.size = size;
    ctx.scope = opt.scope;
    ctx.config.job_id = opt.empty_job_id ? "" : result.job;
    ctx.config.slots = opt.slots;
    ctx.config.timeout = seconds(30);
    auto store = FileStore::open(result.store);
    CHILD_CHECK(store.ok(), "%s", store.status().to_string().c_str());
    ctx.store = std::move(store).value();
    TransportParams params{r, size, &ctx.config, ctx.store.get(), ctx.scope};
    auto t = create_shm_transport(params);
    CHILD_CHECK(t.ok(), "%s", t.status().to_string().c_str());
    ctx.t = std::move(t).value();
    body(ctx);
  }));
  if (opt.empty_job_id) {
    auto store = FileStore::open(result.store);
    auto job = store.value()->get(opt.scope + "/shm/job", milliseconds(100));
    EXPECT_TRUE(job.ok()) << "rank 0 did not publish a job id";
    if (job.ok()) result.job = to_string(job.value());
  }
  // Ranks that failed skipped their destructors; only a clean run must leave nothing behind.
  const auto left = leftover_segments(result.job);
  if (!failed) {
    EXPECT_TRUE(left.empty()) << left.size() << " segments left, first " << left[0];
  }
  for (const auto& name : left) shm_unlink(("/" + name).c_str());
  std::error_code ec;
  std::filesystem::remove_all(result.store, ec);
  return result;
}

// notify(), retried while the receiver's ring is full (kBusy); any other status is returned.
Status notify_when_room(Transport& t, int peer, uint32_t tag) {
  Status s;
  while ((s = t.notify(peer, tag)).code() == StatusCode::kBusy) std::this_thread::yield();
  return s;
}

std::vector<TransportCompletion> poll_all(Transport& t) {
  std::vector<TransportCompletion> out;
  TransportCompletion buf[16];
  size_t n;
  while ((n = t.poll(buf)) > 0) out.insert(out.end(), buf, buf + n);
  return out;
}

// ---- the Mailbox over shm ----

class ShmMailbox : public ::testing::TestWithParam<bool> {};

TEST_P(ShmMailbox, MessagesArriveInOrderAndCreditsComeBack) {
  const bool direct = GetParam();
  const uint32_t kMsgs = 400 / kSlowdown;
  run_ranks(3, [&](Ctx& c) {
    auto made = Mailbox::create(*c.t, MailboxOptions{4096, 4, direct});
    CHILD_CHECK(made.ok(), "%s", made.status().to_string().c_str());
    Mailbox& box = *made.value();
    c.publish("inbox", box.inbox_key());
    c.connect_all();
    for (int p = 0; p < c.size; ++p) {
      if (p != c.rank) CHILD_OK(box.connect_peer(p, c.fetch("inbox", p)));
    }
    CHILD_CHECK(box.direct() == direct, "direct %d", box.direct());
    std::vector<uint32_t> sent(c.size, 0), received(c.size, 0);
    auto body_of = [](int from, uint32_t i) {
      std::string s = "from " + std::to_string(from) + " #" + std::to_string(i) + " ";
      s.append(i * 13 % 3000, static_cast<char>('a' + i % 26));
      return s;
    };
    auto pump = [&] {
      bool progress = false;
      for (const TransportCompletion& e : poll_all(*c.t)) {
        MailboxEvent ev = box.on_completion(e);
        CHILD_CHECK(ev.kind != MailboxEvent::Kind::kError, "%s", ev.error.to_string().c_str());
        if (ev.kind != MailboxEvent::Kind::kMessage) continue;
        InMessage* m = ev.message;
        const std::string got(reinterpret_cast<const char*>(m->payload), m->payload_bytes);
        CHILD_CHECK(got == body_of(m->peer, received[m->peer]), "message %u from rank %d: %.40s",
                    received[m->peer], m->peer, got.c_str());
        CHILD_CHECK(m->user_header[0] == static_cast<uint8_t>(m->peer), "user header");
        ++received[m->peer];
        box.release(m);
        progress = true;
      }
      return box.flush() || progress;
    };
    auto done = [&] {
      for (int p = 0; p < c.size; ++p) {
        if (p == c.rank) continue;
        if (sent[p] < kMsgs || received[p] < kMsgs || box.credits(p) != box.slots(p)) return false;
      }
      return !box.has_deferred();
    };
    const auto deadline = Clock::now() + seconds(60);
    while (!done()) {
      CHILD_CHECK(Clock::now() < deadline, "stuck");
      bool progress = false;
      for (int p = 0; p < c.size; ++p) {
        SendSlot slot;
        if (p == c.rank || sent[p] == kMsgs || !box.try_acquire(p, &slot)) continue;
        const std::string text = body_of(c.rank, sent[p]);
        std::memset(slot.user_header, c.rank, kUserHeaderBytes);
        std::memcpy(slot.payload, text.data(), text.size());
        CHILD_OK(box.send(slot, text.size()));
        ++sent[p];
        progress = true;
      }
      if (!pump() && !progress) c.t->wait(milliseconds(1));
    }
    c.barrier("done", [&] { pump(); });
    CHILD_CHECK(box.stats().sent == 2u * kMsgs && box.stats().received == 2u * kMsgs,
                "stats sent %llu received %llu", (unsigned long long)box.stats().sent,
                (unsigned long long)box.stats().received);
    CHILD_CHECK(box.stats().spills == 0, "spills %llu", (unsigned long long)box.stats().spills);
  });
}

INSTANTIATE_TEST_SUITE_P(Paths, ShmMailbox, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "direct" : "staged"; });

// ---- naming and cleanup ----

TEST(ShmTransport, SegmentsAreUnlinkedWhileMappingsStayUsable) {
  run_ranks(2, [](Ctx& c) {
    auto region = c.t->allocate(8192, MemoryKind::kHost);
    CHILD_CHECK(region.ok(), "%s", region.status().to_string().c_str());
    auto scratch = c.t->allocate(100, MemoryKind::kHost);
    CHILD_CHECK(scratch.ok(), "%s", scratch.status().to_string().c_str());
    auto key = ShmKey::unpack(region.value()->remote_key(), "test");
    CHILD_CHECK(key.ok(), "%s", key.status().to_string().c_str());
    CHILD_CHECK(key->name == shm_segment_name(c.config.job_id, c.scope, c.rank, 1),
                "segment name %s", key->name.c_str());
    auto scratch_key = ShmKey::unpack(scratch.value()->remote_key(), "test");
    CHILD_CHECK(shm_exists(scratch_key->name), "segment %s missing", scratch_key->name.c_str());
    scratch.value().reset();
    CHILD_CHECK(!shm_exists(scratch_key->name), "a destroyed region's segment remains");
    c.publish("region", region.value()->remote_key());
    c.connect_all();
    const int peer = 1 - c.rank;
    const Bytes peer_key = c.fetch("region", peer);
    auto a = c.t->import_region(peer, peer_key);
    auto b = c.t->import_region(peer, peer_key);
    CHILD_CHECK(a.ok() && b.ok(), "import");
    CHILD_CHECK(c.t->mapped_address(*a.value()) == c.t->mapped_address(*b.value()),
                "two imports of one segment should share one mapping");
    auto* pa = static_cast<uint8_t*>(c.t->mapped_address(*a.value()));
    CHILD_CHECK(pa[0] == 0 && pa[8191] == 0, "allocated memory is not zero-filled");
    a.value().reset();
    pa = static_cast<uint8_t*>(c.t->mapped_address(*b.value()));
    pa[10] = static_cast<uint8_t>(0x40 + c.rank);  // still mapped after the first import went
    c.barrier("stored");
    const auto* own = static_cast<const uint8_t*>(region.value()->data());
    CHILD_CHECK(own[10] == 0x40 + peer, "the peer's store did not land");
    // The transport goes first; its region's name goes with it, the memory stays.
    c.t.reset();
    CHILD_CHECK(!shm_exists(key->name), "segment %s outlived its transport", key->name.c_str());
    CHILD_CHECK(!shm_exists(shm_segment_name(c.config.job_id, c.scope, c.rank, 0)),
                "control segment outlived its transport");
    c.barrier("unlinked");
    pa[11] = 1;  // the peer unlinked its segment; this mapping still works
    static_cast<uint8_t*>(region.value()->data())[12] = 1;
    CHILD_CHECK(pa[11] == 1, "mapping");
    b.value().reset();
    region.value().reset();  // after the transport: must not unlink (or crash) again
  });
}

TEST(ShmTransport, AStaleSegmentOfAnEarlierRunDoesNotBreakTheNextOne) {
  const std::string job = unique_job();
  const std::string scope = "shmtest";
  // Leftovers under the names ranks 0 and 1 will use: control segment and first region.
  for (const std::string& name :
       {shm_segment_name(job, scope, 0, 0), shm_segment_name(job, scope, 0, 1),
        shm_segment_name(job, scope, 1, 0)}) {
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << name << ": " << strerror(errno);
    ASSERT_EQ(write(fd, "stale", 5), 5);
    close(fd);
  }
  RunOptions opt;
  opt.job = job;
  opt.scope = scope;
  run_ranks(
      2,
      [](Ctx& c) {
        auto region = c.t->allocate(4096, MemoryKind::kHost);
        CHILD_CHECK(region.ok(), "%s", region.status().to_string().c_str());
        c.publish("region", region.value()->remote_key());
        c.connect_all();
        auto remote = c.t->import_region(1 - c.rank, c.fetch("region", 1 - c.rank));
        CHILD_CHECK(remote.ok(), "%s", remote.status().to_string().c_str());
        CHILD_OK(c.t->notify(1 - c.rank, 5));
        const auto deadline = Clock::now() + seconds(30);
        std::vector<TransportCompletion> got;
        while ((got = poll_all(*c.t)).empty()) {
          CHILD_CHECK(Clock::now() < deadline, "no notification");
          c.t->wait(milliseconds(50));
        }
        CHILD_CHECK(got[0].tag == 5, "tag");
        c.barrier("end");
      },
      opt);
}

TEST(ShmTransport, WithoutAJobIdRankZeroPicksOneForEveryone) {
  RunOptions opt;
  opt.empty_job_id = true;
  const RunResult r = run_ranks(
      3,
      [](Ctx& c) {
        c.connect_all();
        CHILD_OK(c.t->notify((c.rank + 1) % c.size, 1));
        const auto deadline = Clock::now() + seconds(30);
        while (poll_all(*c.t).empty()) {
          CHILD_CHECK(Clock::now() < deadline, "no notification");
          c.t->wait(milliseconds(50));
        }
        c.barrier("end");
      },
      opt);
  EXPECT_EQ(r.job.size(), 17u) << r.job;
}

// ---- bad input (ranks as transports of one process: shm works there too) ----

struct LocalPair {
  Config config;
  HashStore store;
  std::string job = unique_job();
  std::unique_ptr<Transport> t[2];
  explicit LocalPair(bool connect = true) {
    config.job_id = job;
    for (int r = 0; r < 2; ++r) {
      auto made = create_shm_transport(TransportParams{r, 2, &config, &store, "local"});
      EXPECT_TRUE(made.ok()) << made.status().to_string();
      if (made.ok()) t[r] = std::move(made).value();
    }
    if (!connect) return;
    for (int r = 0; r < 2; ++r) {
      for (int p = 0; p < 2; ++p) {
        Status s = t[r]->connect(p, t[p]->local_address());
        EXPECT_TRUE(s.ok()) << s.to_string();
      }
    }
  }
  ~LocalPair() {
    t[0].reset();
    t[1].reset();
    const auto left = leftover_segments(job);
    EXPECT_TRUE(left.empty()) << left.size() << " segments left, first " << left[0];
    for (const auto& name : left) shm_unlink(("/" + name).c_str());
  }
};

std::vector<uint8_t> repack(const std::vector<uint8_t>& blob, void (*edit)(ShmKey&)) {
  auto k = ShmKey::unpack(blob, "test");
  EXPECT_TRUE(k.ok());
  ShmKey key = k.value();
  edit(key);
  return key.pack();
}

void expect_error(const Status& s, StatusCode code, const std::string& words) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.to_string();
}

TEST(ShmTransport, BadCreationParametersAreClearErrors) {
  Config config;
  config.job_id = unique_job();
  HashStore store;
  expect_error(create_shm_transport(TransportParams{0, 2, &config, nullptr, "x"}).status(),
               StatusCode::kInvalidArgument, "store");
  expect_error(create_shm_transport(TransportParams{2, 2, &config, &store, "x"}).status(),
               StatusCode::kInvalidArgument, "rank 2 of world size 2");
  expect_error(create_shm_transport(TransportParams{0, 0, &config, &store, "x"}).status(),
               StatusCode::kInvalidArgument, "world size 0");
  Config long_job = config;
  long_job.job_id.assign(200, 'j');
  expect_error(create_shm_transport(TransportParams{0, 1, &long_job, &store, "x"}).status(),
               StatusCode::kInvalidArgument, "EAGERCOMM_JOB_ID has 200 characters");
  // Odd characters are replaced, not refused.
  Config odd = config;
  odd.job_id = config.job_id + "/a b";
  auto t = create_shm_transport(TransportParams{0, 1, &odd, &store, "x"});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(shm_exists(shm_segment_name(config.job_id + "_a_b", "x", 0, 0)));
  t.value().reset();
  EXPECT_TRUE(leftover_segments(config.job_id + "_a_b").empty());
  // A rank without a job id waits for rank 0's, and says so when it does not come.
  Config no_job;
  no_job.timeout = milliseconds(50);
  expect_error(create_shm_transport(TransportParams{1, 2, &no_job, &store, "y"}).status(),
               StatusCode::kTimeout, "y/shm/job");
}

TEST(ShmTransport, BadKindsAndRegistrationAreClearErrors) {
  LocalPair lp;
  Transport& t = *lp.t[0];
  EXPECT_EQ(t.name(), "shm");
  int x = 0;
  expect_error(t.register_memory(&x, sizeof(x), MemoryKind::kHost).status(),
               StatusCode::kNotSupported, "allocate()");
  expect_error(t.register_memory(nullptr, 8, MemoryKind::kHost).status(),
               StatusCode::kInvalidArgument, "null");
  expect_error(t.register_memory(nullptr, 8, MemoryKind::kCuda).status(),
               StatusCode::kInvalidArgument, "null");
  expect_error(t.allocate(64, static_cast<MemoryKind>(9)).status(), StatusCode::kInvalidArgument,
               "unknown memory kind 9");
  expect_error(t.allocate(uint64_t{1} << 50, MemoryKind::kHost).status(),
               StatusCode::kInvalidArgument, "at most");
  auto empty = t.allocate(0, MemoryKind::kHost);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_EQ(empty.value()->size(), 0u);
}

// Where CUDA cannot work, kCuda is refused naming why: kNotSupported in a build without CUDA,
// kUnavailable without a GPU. Device keys are still parsed and checked first
// (tests/transport/gpu_ipc_test.cc has the device-free key tests and, with a GPU, moves device data
// through this transport).
TEST(ShmTransport, CudaMemoryWithoutAGpuIsAClearError) {
  if (!gpu::query().devices.empty()) {
    GTEST_SKIP() << "a GPU is present: gpu_ipc_test moves device data instead";
  }
  LocalPair lp;
  Transport& t = *lp.t[0];
  const StatusCode code = gpu::cuda_built() ? StatusCode::kUnavailable : StatusCode::kNotSupported;
  const std::string why = gpu::cuda_built() ? "needs a GPU" : "needs a build with CUDA";
  expect_error(t.allocate(64, MemoryKind::kCuda).status(), code, why);
  expect_error(t.allocate(64, MemoryKind::kCuda).status(), code, "shm: allocate");
  int x = 0;
  expect_error(t.register_memory(&x, sizeof(x), MemoryKind::kCuda).status(), code, why);
  if (gpu::cuda_built()) {
    expect_error(t.allocate(64, MemoryKind::kCuda).status(), code, gpu::query().reason);
  }
  // A well-formed device key from rank 1 gets the same answer on import; a malformed one is
  // refused for what is wrong with it, GPU or not.
  CudaIpcKey key;
  key.owner = 1;
  key.bytes = 4096;
  key.process = cuda_ipc_process_token() + 1;  // another process: the IPC path
  expect_error(t.import_region(1, key.pack()).status(), code, why);
  key.process = cuda_ipc_process_token();  // this process: the pointer path
  expect_error(t.import_region(1, key.pack()).status(), code, why);
  expect_error(t.import_region(0, key.pack()).status(), StatusCode::kProtocolError,
               "belongs to rank 1");
  std::vector<uint8_t> host_kind = key.pack();
  host_kind[5] = static_cast<uint8_t>(MemoryKind::kHost);
  expect_error(t.import_region(1, host_kind).status(), StatusCode::kProtocolError, "not cuda");
  // The transport keeps working for host memory.
  auto region = lp.t[1]->allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  auto remote = t.import_region(1, region.value()->remote_key());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  EXPECT_NE(t.mapped_address(*remote.value()), nullptr);
}

TEST(ShmTransport, BadKeysAreClearErrors) {
  LocalPair lp;
  Transport& a = *lp.t[0];
  Transport& b = *lp.t[1];
  auto region = b.allocate(4096, MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  const std::vector<uint8_t> key = region.value()->remote_key();
  ASSERT_TRUE(a.import_region(1, key).ok());
  expect_error(a.import_region(7, key).status(), StatusCode::kInvalidArgument, "peer rank 7");
  expect_error(a.import_region(-1, key).status(), StatusCode::kInvalidArgument, "peer rank -1");
  expect_error(a.import_region(0, key).status(), StatusCode::kProtocolError, "belongs to rank 1");
  expect_error(a.import_region(1, std::vector<uint8_t>(key.begin(), key.begin() + 5)).status(),
               StatusCode::kProtocolError, "too short");
  std::vector<uint8_t> garbage(key.size(), 0x77);
  expect_error(a.import_region(1, garbage).status(), StatusCode::kProtocolError, "not an shm key");
  std::vector<uint8_t> longer = key;
  longer.push_back('x');
  expect_error(a.import_region(1, longer).status(), StatusCode::kProtocolError, "announces");
  expect_error(a.import_region(1, b.local_address()).status(), StatusCode::kProtocolError,
               "not a region key");
  expect_error(a.import_region(1, repack(key, [](ShmKey& k) { k.check ^= 1; })).status(),
               StatusCode::kProtocolError, "does not match");
  expect_error(a.import_region(1, repack(key, [](ShmKey& k) { k.bytes += 8192; })).status(),
               StatusCode::kProtocolError, "stale segment");
  expect_error(
      a.import_region(1, repack(key, [](ShmKey& k) { k.bytes = uint64_t{1} << 60; })).status(),
      StatusCode::kProtocolError, "more than");
  expect_error(a.import_region(1, repack(key, [](ShmKey& k) { k.name = "/../../etc/x"; })).status(),
               StatusCode::kProtocolError, "invalid segment");
  expect_error(
      a.import_region(1, repack(key, [](ShmKey& k) { k.name = "/eagercomm-otherjob-1-1"; }))
          .status(),
      StatusCode::kProtocolError, "EAGERCOMM_JOB_ID");
  // A freed region: its segment is gone.
  region.value().reset();
  expect_error(a.import_region(1, key).status(), StatusCode::kPeerFailed, "does not exist");
}

TEST(ShmTransport, BadPeersAndAddressesAreClearErrors) {
  LocalPair lp(false);
  Transport& a = *lp.t[0];
  Transport& b = *lp.t[1];
  expect_error(a.notify(1, 1), StatusCode::kInvalidArgument, "not connected");
  expect_error(a.notify(2, 1), StatusCode::kInvalidArgument, "peer rank 2");
  expect_error(a.connect(2, b.local_address()), StatusCode::kInvalidArgument, "peer rank 2");
  expect_error(a.connect(0, b.local_address()), StatusCode::kProtocolError, "belongs to rank 1");
  expect_error(a.connect(1, std::vector<uint8_t>{1, 2, 3}), StatusCode::kProtocolError,
               "too short");
  auto region = b.allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  expect_error(a.connect(1, region.value()->remote_key()), StatusCode::kProtocolError,
               "not a transport address");
  ASSERT_TRUE(a.connect(1, b.local_address()).ok());
  ASSERT_TRUE(a.connect(1, b.local_address()).ok()) << "connect is idempotent";
  ASSERT_TRUE(a.connect(0, a.local_address()).ok()) << "connecting to oneself is harmless";
  expect_error(a.connect(1, repack(b.local_address(), [](ShmKey& k) { k.check ^= 1; })),
               StatusCode::kInvalidArgument, "different address");
  // Notifying oneself works (the ring for this rank's own sends).
  ASSERT_TRUE(a.notify(0, 9).ok());
  auto self = poll_all(a);
  ASSERT_EQ(self.size(), 1u);
  EXPECT_EQ(self[0].peer, 0);
  EXPECT_EQ(self[0].tag, 9u);
  // Writes: bounds and foreign remote regions.
  auto src = a.allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(src.ok());
  auto remote = a.import_region(1, region.value()->remote_key());
  ASSERT_TRUE(remote.ok());
  expect_error(a.write(*src.value(), 0, *remote.value(), 32, 64, 1, 1),
               StatusCode::kInvalidArgument, "out of bounds");
  expect_error(a.write(*src.value(), 32, *remote.value(), 0, 64, 1, 1),
               StatusCode::kInvalidArgument, "out of bounds");
  auto foreign = b.import_region(1, region.value()->remote_key());
  ASSERT_TRUE(foreign.ok());
  expect_error(a.write(*src.value(), 0, *foreign.value(), 0, 8, 1, 1), StatusCode::kInvalidArgument,
               "did not import");
  EXPECT_EQ(a.mapped_address(*foreign.value()), nullptr);
  ASSERT_TRUE(a.write(*src.value(), 0, *remote.value(), 0, 64, 1, 1).ok());
  // A rank of a world of another size.
  Config config = lp.config;
  auto c = create_shm_transport(TransportParams{2, 3, &config, &lp.store, "local"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // connect() records the address; the peer's segment is mapped, and checked, on first use.
  ASSERT_TRUE(c.value()->connect(0, a.local_address()).ok());
  EXPECT_EQ(c.value()->connected_peers(), 0u);
  expect_error(c.value()->notify(0, 1), StatusCode::kMismatch, "world size 2");
  // A peer that is gone: its control segment no longer exists. Sticky: the next call says the
  // same without looking again.
  const std::vector<uint8_t> b_address = b.local_address();
  foreign.value().reset();
  region.value().reset();
  lp.t[1].reset();
  ASSERT_TRUE(c.value()->connect(1, b_address).ok());
  expect_error(c.value()->notify(1, 1), StatusCode::kPeerFailed, "does not exist");
  expect_error(c.value()->notify(1, 1), StatusCode::kPeerFailed, "gone before rank 2 connected");
  EXPECT_EQ(c.value()->connected_peers(), 0u);
}

// Connections on first use (issue 21): connect() maps nothing, the first notify maps the peer's
// control segment, and the peer takes notifications from a rank it never connected to itself.
TEST(ShmTransport, ConnectsOnFirstUseAndTakesTrafficFromUnconnectedPeers) {
  LocalPair lp(false);
  Transport& a = *lp.t[0];
  Transport& b = *lp.t[1];
  EXPECT_TRUE(a.capabilities().connects_on_demand);
  ASSERT_TRUE(a.connect(1, b.local_address()).ok());
  EXPECT_EQ(a.connected_peers(), 0u);
  ASSERT_TRUE(a.notify(1, 7).ok());
  EXPECT_EQ(a.connected_peers(), 1u);
  auto got = poll_all(b);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].peer, 0);
  EXPECT_EQ(got[0].tag, 7u);
  EXPECT_EQ(b.connected_peers(), 0u);
  // b never called connect(0): it cannot answer.
  expect_error(b.notify(0, 1), StatusCode::kInvalidArgument, "not connected");
}

// shm's wait() sleeps at most the 100 ms liveness interval (then poll() probes the peers): a
// wait() with nothing to do sleeps about that long, also right after a wake() was taken, and
// 300 ms until a peer's notify() take a few wait() calls, not the thousands of one that does
// not sleep. (That notifications and wake() end a wait, without losing any: the contract suite.)
TEST(ShmTransport, WaitSleepsInStepsOfTheLivenessInterval) {
  LocalPair lp;
  Transport& a = *lp.t[0];
  Transport& b = *lp.t[1];
  const auto t0 = Clock::now();
  b.wait(milliseconds(100));
  EXPECT_GE(Clock::now() - t0, milliseconds(80)) << "wait() with nothing to do returned early";
  b.wake();
  b.wait(seconds(30));  // takes the wake
  const auto t1 = Clock::now();
  b.wait(milliseconds(100));
  EXPECT_GE(Clock::now() - t1, milliseconds(80)) << "one wake() ended more than one wait()";
  std::thread notifier([&] {
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_TRUE(notify_when_room(a, 1, 42).ok());
  });
  int waits = 0;
  std::vector<TransportCompletion> got;
  const auto t2 = Clock::now();
  while (got.empty() && Clock::now() - t2 < seconds(20)) {
    b.wait(seconds(30));
    ++waits;
    got = poll_all(b);
  }
  notifier.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, 42u);
  EXPECT_LE(waits, 20) << waits << " wait() calls in 300 ms: it does not sleep";
}

// A peer that scribbles over the control segment: errors, never a crash or a busy loop.
TEST(ShmTransport, CorruptRingsAreErrorsNotCrashes) {
  LocalPair lp;
  Transport& a = *lp.t[0];
  Transport& b = *lp.t[1];
  const uint32_t capacity = shm_ring_capacity_for(lp.config.slots);
  for (uint32_t i = 0; i < capacity; ++i) ASSERT_TRUE(a.notify(1, i).ok());
  ASSERT_EQ(a.notify(1, 0).code(), StatusCode::kBusy);
  // Overwrite everything after b's header page with 0xa5.
  const std::string name = shm_segment_name(lp.job, "local", 1, 0);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(static_cast<uint8_t*>(p) + kShmHeaderBytes, 0xa5, st.st_size - kShmHeaderBytes);
  munmap(p, st.st_size);

  // The sender sees an impossible head, once and for good.
  expect_error(a.notify(1, 1), StatusCode::kProtocolError, "corrupted");
  expect_error(a.notify(1, 1), StatusCode::kProtocolError, "corrupted");
  // The receiver reports each sender once, then ignores them.
  auto got = poll_all(b);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& e : got) EXPECT_EQ(e.kind, TransportCompletion::Kind::kPeerError);
  EXPECT_NE(got[0].peer, got[1].peer);
  EXPECT_TRUE(poll_all(b).empty());
  // wait() does not spin on the broken rings: after taking the scribbled "woken" word once,
  // it sleeps for its timeout.
  b.wait(milliseconds(100));
  const auto t0 = Clock::now();
  b.wait(milliseconds(100));
  EXPECT_GE(Clock::now() - t0, milliseconds(80));
  // The other direction is unaffected.
  ASSERT_TRUE(b.notify(0, 3).ok());
  got = poll_all(a);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, 3u);
}

}  // namespace
}  // namespace eagercomm::test
