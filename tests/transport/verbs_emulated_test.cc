// The verbs transport on the emulated RDMA device (transport/verbs/emulated): the real transport
// code creating, connecting (store path) and writing over queue pairs, and the device's own
// rules (access errors, the QP state machine, RNR, flush errors) that the transport must face.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "runtime/build_config.h"
#include "runtime/log.h"
#include "transport/registry.h"

#if EAGERCOMM_HAVE_VERBS
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "transport/verbs/emulated/emu_cm.h"
#include "transport/verbs/emulated/emu_device_memory.h"
#include "transport/verbs/emulated/emu_verbs.h"
#include "transport/verbs/verbs_qp_settings.h"
#include "transport/verbs/verbs_wire.h"
#endif

namespace eagercomm {
namespace {

#if EAGERCOMM_HAVE_VERBS

using namespace std::chrono_literals;

Config emulated() {
  Config c;
  c.verbs_emulate = true;
  return c;
}

std::vector<std::unique_ptr<Transport>> connected_world(int size, const Config& config) {
  std::vector<std::unique_ptr<Transport>> t;
  for (int r = 0; r < size; ++r) {
    TransportParams params{r, size, &config, nullptr, "emu-test", false};
    auto made = create_transport("verbs", params);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    if (!made.ok()) return {};
    t.push_back(std::move(made.value()));
  }
  for (int r = 0; r < size; ++r) {
    for (int p = 0; p < size; ++p) {
      if (p == r) continue;
      EXPECT_TRUE(t[r]->connect(p, t[p]->local_address()).ok());
    }
  }
  return t;
}

// Polls every transport until `done` or 10 s pass; completions go to `seen` per rank.
template <typename Done>
bool drive(std::vector<std::unique_ptr<Transport>>& t,
           std::vector<std::vector<TransportCompletion>>& seen, Done&& done) {
  seen.resize(t.size());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (size_t r = 0; r < t.size(); ++r) {
      TransportCompletion buf[16];
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
    if (done()) return true;
    std::this_thread::sleep_for(100us);
  }
  return false;
}

size_t count(const std::vector<TransportCompletion>& v, TransportCompletion::Kind kind) {
  size_t n = 0;
  for (const auto& c : v) n += c.kind == kind;
  return n;
}

TEST(VerbsEmulated, TheDeviceIsListedWithAnActivePort) {
  const verbs::VerbsApi& api = verbs::emulated_verbs_api();
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  ASSERT_EQ(n, 1);
  EXPECT_STREQ(api.get_device_name(list[0]), "emu0");
  ibv_context* ctx = api.open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_port_attr pa{};
  ASSERT_EQ(api.query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_GT(pa.lid, 0);
  EXPECT_EQ(api.close_device(ctx), 0);
  api.free_device_list(list);
}

// Over both connection paths: rdma_cm (what auto picks here, the emulated device having it) and
// the store.
class VerbsEmulatedPaths : public ::testing::TestWithParam<IbConnectMode> {};

TEST_P(VerbsEmulatedPaths, WritesArriveWithTheirTagsInOrderAndCompleteOnce) {
  Config config = emulated();
  config.ib_connect = GetParam();
  auto t = connected_world(2, config);
  ASSERT_EQ(t.size(), 2u);
  constexpr size_t kBytes = 100 * 1024;  // several packets
  auto dst = t[1]->allocate(kBytes, MemoryKind::kHost);
  auto src = t[0]->allocate(kBytes, MemoryKind::kHost);
  ASSERT_TRUE(dst.ok() && src.ok());
  auto remote = t[0]->import_region(1, dst.value()->remote_key());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  auto* bytes = static_cast<uint8_t*>(src.value()->data());
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<std::vector<TransportCompletion>> seen;
  // The store path connects asynchronously: writes may be refused (kBusy) until it has.
  constexpr int kWrites = 20;
  int posted = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  seen.resize(2);
  while (posted < kWrites && std::chrono::steady_clock::now() < deadline) {
    const size_t len = posted == 0 ? 8 : kBytes / kWrites;  // the first one inline
    Status s = t[0]->write(*src.value(), posted * (kBytes / kWrites), *remote.value(),
                           posted * (kBytes / kWrites), len, 1000 + posted, 77 + posted);
    if (s.ok()) {
      ++posted;
      continue;
    }
    ASSERT_EQ(s.code(), StatusCode::kBusy) << s.to_string();
    for (int r = 0; r < 2; ++r) {
      TransportCompletion buf[16];
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
  }
  ASSERT_EQ(posted, kWrites);
  ASSERT_TRUE(drive(t, seen,
                    [&] {
                      return count(seen[1], TransportCompletion::Kind::kNotify) == kWrites &&
                             count(seen[0], TransportCompletion::Kind::kWriteDone) == kWrites;
                    }))
      << "notifies " << count(seen[1], TransportCompletion::Kind::kNotify) << ", write-dones "
      << count(seen[0], TransportCompletion::Kind::kWriteDone);
  uint32_t expect = 1000;
  for (const auto& c : seen[1]) {
    if (c.kind != TransportCompletion::Kind::kNotify) continue;
    EXPECT_EQ(c.peer, 0);
    EXPECT_EQ(c.tag, expect++);
  }
  std::vector<uint64_t> cookies;
  for (const auto& c : seen[0]) {
    if (c.kind == TransportCompletion::Kind::kWriteDone) cookies.push_back(c.cookie);
  }
  std::sort(cookies.begin(), cookies.end());
  for (int i = 0; i < kWrites; ++i) EXPECT_EQ(cookies[i], 77u + i);
  const auto* got = static_cast<const uint8_t*>(dst.value()->data());
  EXPECT_EQ(std::memcmp(got, bytes, 8), 0);  // the inline write
  EXPECT_EQ(
      std::memcmp(got + kBytes / kWrites, bytes + kBytes / kWrites, kBytes - kBytes / kWrites), 0);
  EXPECT_EQ(count(seen[0], TransportCompletion::Kind::kPeerError), 0u);
  EXPECT_EQ(count(seen[1], TransportCompletion::Kind::kPeerError), 0u);
}

Status post(std::vector<std::unique_ptr<Transport>>& t,
            std::vector<std::vector<TransportCompletion>>& seen,
            const std::function<Status()>& write);

INSTANTIATE_TEST_SUITE_P(Connect, VerbsEmulatedPaths,
                         ::testing::Values(IbConnectMode::kCm, IbConnectMode::kStore),
                         [](const auto& info) {
                           return info.param == IbConnectMode::kCm ? "cm" : "store";
                         });

// Defect 6 of issue 18: a notify() completed with a kWriteDone of cookie 0, which the contract
// promises for write() only (the mailbox took it for slot 0's write).
TEST(VerbsEmulated, NotifyGivesNoWriteDone) {
  const Config config = emulated();
  auto t = connected_world(2, config);
  ASSERT_EQ(t.size(), 2u);
  auto dst = t[1]->allocate(64, MemoryKind::kHost);
  auto src = t[0]->allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(dst.ok() && src.ok());
  auto remote = t[0]->import_region(1, dst.value()->remote_key());
  ASSERT_TRUE(remote.ok());
  std::vector<std::vector<TransportCompletion>> seen(2);
  // Posted until the pair is connected (kBusy before; the cm path connects in poll()).
  Status s = post(t, seen, [&] { return t[0]->notify(1, 41); });
  ASSERT_TRUE(s.ok()) << s.to_string();
  // A write after it: its kWriteDone comes after the notify's send completion (one CQ, in order).
  s = post(t, seen, [&] { return t[0]->write(*src.value(), 0, *remote.value(), 0, 16, 42, 9); });
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(drive(t, seen, [&] {
    return count(seen[0], TransportCompletion::Kind::kWriteDone) >= 1 &&
           count(seen[1], TransportCompletion::Kind::kNotify) == 2;
  }));
  ASSERT_EQ(count(seen[0], TransportCompletion::Kind::kWriteDone), 1u);
  for (const auto& c : seen[0]) {
    if (c.kind != TransportCompletion::Kind::kWriteDone) continue;
    EXPECT_EQ(c.cookie, 9u);
  }
}

// Rank 0 of a connected pair writes to a region rank 1 deregistered: what only the device can
// catch (the transport checks bounds itself), a stale rkey. Returns once rank 0 lost rank 1.
void write_with_a_stale_rkey(std::vector<std::unique_ptr<Transport>>& t,
                             std::vector<std::vector<TransportCompletion>>& seen) {
  ASSERT_EQ(t.size(), 2u);
  auto dst = t[1]->allocate(4096, MemoryKind::kHost);
  auto src = t[0]->allocate(8192, MemoryKind::kHost);
  ASSERT_TRUE(dst.ok() && src.ok());
  auto remote = t[0]->import_region(1, dst.value()->remote_key());
  ASSERT_TRUE(remote.ok());
  seen.assign(2, {});
  dst.value().reset();  // deregistered at rank 1
  Status s(StatusCode::kBusy, "");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (s.code() == StatusCode::kBusy && std::chrono::steady_clock::now() < deadline) {
    s = t[0]->write(*src.value(), 0, *remote.value(), 0, 1024, 5, 6);
    TransportCompletion buf[16];
    for (int r = 0; r < 2; ++r) {
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
  }
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(drive(t, seen, [&] {
    return count(seen[0], TransportCompletion::Kind::kPeerError) > 0;
  })) << "a write with a stale rkey must fail the peer";
}

TEST(VerbsEmulated, AStaleRkeyIsAnAccessErrorThatLosesThePeer) {
  const Config config = emulated();
  auto t = connected_world(2, config);
  std::vector<std::vector<TransportCompletion>> seen;
  ASSERT_NO_FATAL_FAILURE(write_with_a_stale_rkey(t, seen));
  EXPECT_EQ(count(seen[1], TransportCompletion::Kind::kNotify), 0u);
}

// The device thread works for the rank whose transport opened it: its lines carry that rank in
// the prefix (the messages no longer repeat it), though here one thread without a rank of its
// own creates and drives both ranks.
TEST(VerbsEmulated, TheDeviceThreadsLinesCarryItsRank) {
  char dir[] = "/tmp/verbs_emulated_log_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/log";
  Config log_config;
  log_config.log_level = LogLevel::kDebug;
  log_config.log_file = path;
  ASSERT_TRUE(log_configure(log_config).ok());
  log_set_thread_rank(-1);
  {
    const Config config = emulated();
    auto t = connected_world(2, config);
    std::vector<std::vector<TransportCompletion>> seen;
    write_with_a_stale_rkey(t, seen);
  }
  ASSERT_TRUE(log_configure(Config{}).ok());
  std::ifstream in(path);
  const std::string self = ":" + std::to_string(syscall(SYS_gettid)) + " ";
  int requester_lines = 0;  // rank 0's device failing the write
  int lost_lines = 0;
  for (std::string line; std::getline(in, line);) {
    // "<host>:<pid>:<tid> [<rank>] <LEVEL> <subsys>: <message>"
    if (line.find(" DEBUG net: emulated verbs: QP ") != std::string::npos) {
      requester_lines += line.find(" [0] DEBUG net: ") != std::string::npos;
      EXPECT_TRUE(line.find(" [0] ") != std::string::npos ||
                  line.find(" [1] ") != std::string::npos)
          << "a device line without its rank: " << line;
      EXPECT_EQ(line.find(self), std::string::npos) << "not the device's thread: " << line;
    }
    if (line.find("ERROR net: verbs: lost rank 1: ") != std::string::npos) {
      ++lost_lines;  // found by rank 0's poll() on this thread, which has no rank: "-"
      EXPECT_NE(line.find(" [-] ERROR net: verbs: lost rank 1: "), std::string::npos) << line;
    }
  }
  EXPECT_GE(requester_lines, 1) << "rank 0's device logged no failed request";
  EXPECT_EQ(lost_lines, 1);
  std::filesystem::remove_all(dir);
}

// Where rank `from`'s queue pair to `to` is on the emulated fabric (its address says).
verbs::emu::QpRef qp_of(Transport& from, int to, int size) {
  auto a = verbs::decode_address(from.local_address(), from.rank(), size);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  if (!a.ok()) return {};
  return {a.value().lid, a.value().qps[to].qpn};
}

// A host region at `to`, imported by `from`, and a source region at `from`.
struct Route {
  std::unique_ptr<MemoryRegion> src;
  std::unique_ptr<MemoryRegion> dst;
  std::unique_ptr<RemoteRegion> remote;
};
Route route(std::vector<std::unique_ptr<Transport>>& t, int from, int to, size_t bytes) {
  Route r;
  auto dst = t[to]->allocate(bytes, MemoryKind::kHost);
  auto src = t[from]->allocate(bytes, MemoryKind::kHost);
  EXPECT_TRUE(dst.ok() && src.ok());
  if (!dst.ok() || !src.ok()) return r;
  auto remote = t[from]->import_region(to, dst.value()->remote_key());
  EXPECT_TRUE(remote.ok()) << remote.status().to_string();
  if (!remote.ok()) return r;
  r.src = std::move(src.value());
  r.dst = std::move(dst.value());
  r.remote = std::move(remote.value());
  return r;
}

// Posts until the store path has connected (kBusy before), polling meanwhile.
Status post(std::vector<std::unique_ptr<Transport>>& t,
            std::vector<std::vector<TransportCompletion>>& seen,
            const std::function<Status()>& write) {
  seen.resize(t.size());
  Status s(StatusCode::kBusy, "");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (s.code() == StatusCode::kBusy && std::chrono::steady_clock::now() < deadline) {
    s = write();
    if (s.code() != StatusCode::kBusy) break;
    for (size_t r = 0; r < t.size(); ++r) {
      TransportCompletion buf[16];
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
  }
  return s;
}

// A world whose pair (from, to) has carried one 8-byte write (tag 1, cookie 1): connected, on
// whichever path the config picks.
struct World {
  std::vector<std::unique_ptr<Transport>> t;
  std::vector<std::vector<TransportCompletion>> seen;
  Route r;
  bool ok = false;
};
World world_with_a_write(int size, const Config& config, int from, int to) {
  World w;
  w.t = connected_world(size, config);
  w.seen.resize(size);
  if (static_cast<int>(w.t.size()) != size) return w;
  w.r = route(w.t, from, to, 64);
  if (w.r.remote == nullptr) return w;
  const Status s =
      post(w.t, w.seen, [&] { return w.t[from]->write(*w.r.src, 0, *w.r.remote, 0, 8, 1, 1); });
  EXPECT_TRUE(s.ok()) << s.to_string();
  w.ok = s.ok();
  return w;
}

bool lost(const std::vector<TransportCompletion>& v, int peer) {
  for (const auto& c : v) {
    if (c.kind == TransportCompletion::Kind::kPeerError && c.peer == peer) return true;
  }
  return false;
}

// A raw RC queue pair on the emulated device, for what the transport cannot show.
struct RawQp {
  const verbs::VerbsApi& api = verbs::emulated_verbs_api();
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint32_t lid = 0;
  RawQp() {
    int n = 0;
    ibv_device** list = api.get_device_list(&n);
    ctx = api.open_device(list[0]);
    api.free_device_list(list);
    pd = api.alloc_pd(ctx);
    cq = api.create_cq(ctx, 64, nullptr, nullptr, 0);
    ibv_port_attr pa{};
    api.query_port(ctx, 1, &pa);
    lid = pa.lid;
    make_qp();
  }
  void make_qp() {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = api.create_qp(pd, &ia);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = verbs::kQpAccess;
    EXPECT_EQ(
        api.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        0);
  }
  void connect(const RawQp& to) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = to.qp->qp_num;
    a.ah_attr.dlid = static_cast<uint16_t>(to.lid);
    a.ah_attr.port_num = 1;
    EXPECT_EQ(api.modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 8;  // 1 ms per try
    a.retry_cnt = 2;
    a.rnr_retry = 0;
    EXPECT_EQ(api.modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }
  // The next completion, waiting up to 10 s.
  std::optional<ibv_wc> next() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc{};
      if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
      std::this_thread::sleep_for(100us);
    }
    return std::nullopt;
  }
  ~RawQp() {
    if (qp != nullptr) api.destroy_qp(qp);
    api.destroy_cq(cq);
    api.dealloc_pd(pd);
    api.close_device(ctx);
  }
};

// A QP still connected to a QP that was destroyed must not reach the QP that took over its
// number (ports and QP numbers are reused): its packets are dropped and it fails with RETRY_EXC,
// as a stale requester does on a fabric. (The emulator once placed them: a multi-process test
// saw another communicator's writes land in its own memory.)
TEST(VerbsEmulated, AStaleQueuePairCannotReachTheQueuePairThatReusedItsNumber) {
  RawQp a, b, c;
  a.connect(b);
  b.connect(a);
  const uint32_t old_qpn = b.qp->qp_num;
  ASSERT_EQ(b.api.destroy_qp(b.qp), 0);
  b.make_qp();  // the lowest free number: the destroyed one's
  ASSERT_EQ(b.qp->qp_num, old_qpn);
  b.connect(c);
  c.connect(b);
  std::vector<uint8_t> target(64, 0);
  ibv_mr* mr = b.api.reg_mr(b.pd, target.data(), target.size(), verbs::kQpAccess);
  ASSERT_NE(mr, nullptr);
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(b.qp, &rwr, &rbad), 0);
  std::vector<uint8_t> payload(8, 0xab);
  ibv_mr* source = a.api.reg_mr(a.pd, payload.data(), payload.size(), verbs::kQpAccess);
  ASSERT_NE(source, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(payload.data()), 8, source->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target.data());
  wr.wr.rdma.rkey = mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  const std::optional<ibv_wc> done = a.next();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->status, IBV_WC_RETRY_EXC_ERR) << a.api.wc_status_str(done->status);
  EXPECT_EQ(target[0], 0) << "a stale QP's write landed";
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(b.cq, 1, &wc), 0) << "a stale QP's write consumed a receive";
  b.api.dereg_mr(mr);
  a.api.dereg_mr(source);
}

// Defect 8: the GID type travels in the address, and a RoCE v1 / v2 mismatch is refused with
// both named (their packets would never reach each other's QPs).
TEST(VerbsEmulated, AGidTypeMismatchIsRefusedNamingBoth) {
  Config config = emulated();
  config.ib_gid_index = 0;  // GIDs on both sides (the emulated port's only entry)
  std::vector<std::unique_ptr<Transport>> t;
  for (int r = 0; r < 2; ++r) {
    TransportParams params{r, 2, &config, nullptr, "emu-test", false};
    auto made = create_transport("verbs", params);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    t.push_back(std::move(made.value()));
  }
  auto a = verbs::decode_address(t[1]->local_address(), 1, 2);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(a.value().use_gid);
  a.value().gid_roce_v2 = !a.value().gid_roce_v2;
  const Status s = t[0]->connect(1, verbs::encode_address(a.value()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("RoCE v2 GID"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("RoCE v1 GID"), std::string::npos) << s.to_string();
  EXPECT_TRUE(t[0]->connect(1, t[1]->local_address()).ok()) << "the same type connects";
}

// The cm path on the emulated rdma_cm: the CM's attributes are overridden where they must match
// the store path (defect 10: its min_rnr_timer of 0 is 655 ms per RNR retry; defect 9: timeouts).
TEST(VerbsEmulated, TheCmPathSetsTheSameQueuePairAttributesAsTheStorePath) {
  Config config = emulated();
  config.ib_connect = IbConnectMode::kCm;
  config.ib_mtu = IbMtu::k2048;
  World w = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  ASSERT_TRUE(drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify); }));
  for (int from : {0, 1}) {
    auto a = verbs::emu::qp_attributes(qp_of(*t[from], 1 - from, 2));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a.value().state, IBV_QPS_RTS);
    EXPECT_EQ(a.value().min_rnr_timer, 12u) << "rank " << from << ": the CM's 0 must not stay";
    EXPECT_EQ(a.value().timeout, 18) << "the CM's 14 must not stay";
    EXPECT_EQ(a.value().retry_cnt, 7);
    EXPECT_EQ(a.value().rnr_retry, 7);
    EXPECT_EQ(a.value().path_mtu, IBV_MTU_2048) << "EAGERCOMM_IB_MTU caps the path record's";
  }
}

// Defect 5, cm half: a peer that sends and then closes disconnects; its RDMA_CM_EVENT_DISCONNECTED
// was acted on before the CQ was drained, so "peer lost" overtook its last notifications. Now
// every notification comes first, and a peer that left after connecting is no failure (as on
// the store path); writing to it is refused, naming why.
TEST(VerbsEmulated, APeersLastNotificationsComeBeforeItsDisconnect) {
  Config config = emulated();
  config.ib_connect = IbConnectMode::kCm;
  for (int round = 0; round < 5; ++round) {
    auto t = connected_world(2, config);
    ASSERT_EQ(t.size(), 2u);
    std::vector<std::vector<TransportCompletion>> seen(2);
    Route r = route(t, 1, 0, 4096);
    ASSERT_NE(r.remote, nullptr);
    constexpr int kWrites = 30;  // within the receive window: no credit needs rank 0 to poll
    for (int i = 0; i < kWrites; ++i) {
      std::memset(r.src->data(), i + 1, 4096);
      ASSERT_TRUE(post(t, seen, [&] {
                    return t[1]->write(*r.src, 0, *r.remote, 0, 4096, 100 + i, i);
                  }).ok());
      // Only the writer polls: rank 0's notifications wait in its CQ.
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (count(seen[1], TransportCompletion::Kind::kWriteDone) < static_cast<size_t>(i + 1) &&
             std::chrono::steady_clock::now() < deadline) {
        TransportCompletion buf[16];
        const size_t n = t[1]->poll(buf);
        seen[1].insert(seen[1].end(), buf, buf + n);
      }
    }
    t[1]->close();  // disconnects at once: rank 0 polls only now
    ASSERT_TRUE(drive(t, seen, [&] {
      return count(seen[0], TransportCompletion::Kind::kNotify) == kWrites || lost(seen[0], 1);
    }));
    size_t notifies = 0;
    for (const auto& c : seen[0]) {
      if (c.kind == TransportCompletion::Kind::kNotify) ++notifies;
      if (c.kind == TransportCompletion::Kind::kPeerError) {
        EXPECT_EQ(notifies, static_cast<size_t>(kWrites))
            << "round " << round << ": lost before its notifications";
      }
    }
    EXPECT_EQ(notifies, static_cast<size_t>(kWrites));
    // The disconnect travels through rank 0's emulated port, behind the writes: rank 0's device
    // thread hands it to the CM channel some time after close() returned, and the transport acts
    // on it in the first poll after that which finds the CQ empty. Nothing else tells when that
    // was, so poll for a while (wide: a loaded machine may not run the device thread at once).
    const auto settle = std::chrono::steady_clock::now() + 500ms;
    while (std::chrono::steady_clock::now() < settle) {
      t[0]->wait(1ms);
      TransportCompletion buf[16];
      const size_t n = t[0]->poll(buf);
      seen[0].insert(seen[0].end(), buf, buf + n);
    }
    EXPECT_FALSE(lost(seen[0], 1)) << "a peer that closed is not lost";
    const Status s = t[0]->notify(1, 7);
    EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << s.to_string();
    EXPECT_NE(s.message().find("has closed"), std::string::npos) << s.to_string();
  }
}

// Defect 3 of issue 18: a QP that entered ERROR with nothing but flush errors to show for it
// (a catastrophic local error; here without even the async event) was never reported: the flush
// completions were skipped, and the peer looked alive until some timeout.
TEST(VerbsEmulated, AQueuePairInErrorWithOnlyFlushErrorsLosesThePeer) {
  const Config config = emulated();
  auto t = connected_world(2, config);
  ASSERT_EQ(t.size(), 2u);
  std::vector<std::vector<TransportCompletion>> seen(2);
  // Connected first (a write through), so the error is not a connection failure.
  Route r = route(t, 0, 1, 64);
  ASSERT_NE(r.remote, nullptr);
  ASSERT_TRUE(post(t, seen, [&] { return t[0]->write(*r.src, 0, *r.remote, 0, 8, 1, 1); }).ok());
  ASSERT_TRUE(drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify); }));
  ASSERT_TRUE(verbs::emu::inject_qp_error(qp_of(*t[0], 1, 2), verbs::emu::AsyncEvent::kNo).ok());
  EXPECT_TRUE(drive(t, seen, [&] { return lost(seen[0], 1); }))
      << "rank 0's QP to rank 1 is in ERROR (its receives flushed): rank 1 must be lost";
}

// Defect 3: the async event of a fatal QP error is read (and is the first cause named).
TEST(VerbsEmulated, AFatalQueuePairEventLosesThePeer) {
  const Config config = emulated();
  World w = world_with_a_write(3, config, 0, 2);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  ASSERT_TRUE(verbs::emu::inject_qp_error(qp_of(*t[0], 2, 3), verbs::emu::AsyncEvent::kYes).ok());
  EXPECT_TRUE(drive(t, seen, [&] { return lost(seen[0], 2); }));
  EXPECT_FALSE(lost(seen[0], 1)) << "only the QP to rank 2 failed";
}

// Defect 3: a negative ibv_poll_cq (the CQ in error: completions were lost) was taken for "no
// completions", and every peer stalled; now every peer is lost at once.
TEST(VerbsEmulated, ACompletionQueueInErrorLosesEveryPeer) {
  const Config config = emulated();
  auto t = connected_world(3, config);
  ASSERT_EQ(t.size(), 3u);
  std::vector<std::vector<TransportCompletion>> seen(3);
  ASSERT_TRUE(
      verbs::emu::inject_cq_error(qp_of(*t[1], 0, 3).lid, verbs::emu::AsyncEvent::kNo).ok());
  EXPECT_TRUE(drive(t, seen, [&] { return lost(seen[1], 0) && lost(seen[1], 2); }));
}

// Defect 9: the ACK timeout, retry count and SL come from the config table (they were hard-coded)
// and min_rnr_timer is the store path's 12 (defect 10 for the cm path: apply_qp_settings below).
TEST(VerbsEmulated, QueuePairAttributesFollowTheConfigTable) {
  Config config = emulated();
  for (const bool defaults : {true, false}) {
    if (!defaults) {
      config.ib_timeout = 12;
      config.ib_retry_cnt = 5;
      config.ib_sl = 3;
      config.ib_mtu = IbMtu::k1024;
    }
    auto t = connected_world(2, config);
    ASSERT_EQ(t.size(), 2u);
    std::vector<std::vector<TransportCompletion>> seen(2);
    Route r = route(t, 0, 1, 64);
    ASSERT_NE(r.remote, nullptr);
    ASSERT_TRUE(post(t, seen, [&] { return t[0]->write(*r.src, 0, *r.remote, 0, 8, 1, 1); }).ok());
    auto a = verbs::emu::qp_attributes(qp_of(*t[0], 1, 2));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(a.value().state, IBV_QPS_RTS);
    EXPECT_EQ(a.value().timeout, defaults ? 18 : 12);
    EXPECT_EQ(a.value().retry_cnt, defaults ? 7 : 5);
    EXPECT_EQ(a.value().sl, defaults ? 0 : 3);
    EXPECT_EQ(a.value().path_mtu, defaults ? IBV_MTU_4096 : IBV_MTU_1024)
        << "the ports' 4096, or EAGERCOMM_IB_MTU below it";
    EXPECT_EQ(a.value().rnr_retry, 7);
    EXPECT_EQ(a.value().min_rnr_timer, 12u);
    EXPECT_EQ(a.value().pkey_index, 0);
  }
}

// The cm path takes rdma_init_qp_attr()'s attributes and overrides what must match the store
// path: min_rnr_timer (the CM's 0 is 655 ms per RNR retry), timeouts, access (defect 10).
TEST(VerbsQpSettings, OverrideTheConnectionManagersAttributes) {
  Config config;
  config.ib_timeout = 16;
  config.ib_retry_cnt = 6;
  config.ib_tc = 106;  // DSCP 26 (a lossless class), ECN capable
  const verbs::QpSettings s = verbs::qp_settings(config);
  EXPECT_FALSE(s.sl.has_value()) << "auto: the path record's SL";
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.pkey_index = 5;  // the CM's, kept
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  verbs::apply_qp_settings(s, init, mask);
  EXPECT_EQ(init.pkey_index, 5);
  EXPECT_EQ(init.qp_access_flags, verbs::kQpAccess);
  EXPECT_TRUE(mask & IBV_QP_ACCESS_FLAGS);
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.min_rnr_timer = 0;
  rtr.ah_attr.sl = 2;
  rtr.ah_attr.is_global = 1;
  mask = IBV_QP_STATE | IBV_QP_AV;
  verbs::apply_qp_settings(s, rtr, mask);
  EXPECT_EQ(rtr.min_rnr_timer, 12);
  EXPECT_TRUE(mask & IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(rtr.ah_attr.sl, 2) << "the path's SL stays when EAGERCOMM_IB_SL is auto";
  EXPECT_EQ(rtr.ah_attr.grh.traffic_class, 106);
  // The path MTU: EAGERCOMM_IB_MTU caps the path record's, never raises it.
  config.ib_mtu = IbMtu::k1024;
  const verbs::QpSettings capped = verbs::qp_settings(config);
  for (const auto& [path, expect] :
       {std::pair{IBV_MTU_4096, IBV_MTU_1024}, std::pair{IBV_MTU_1024, IBV_MTU_1024},
        std::pair{IBV_MTU_512, IBV_MTU_512}}) {
    rtr.path_mtu = path;
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU;
    verbs::apply_qp_settings(capped, rtr, mask);
    EXPECT_EQ(rtr.path_mtu, expect) << "path MTU code " << path;
    EXPECT_TRUE(mask & IBV_QP_PATH_MTU);
  }
  rtr.path_mtu = IBV_MTU_4096;
  verbs::apply_qp_settings(s, rtr, mask);
  EXPECT_EQ(rtr.path_mtu, IBV_MTU_4096) << "auto leaves the path's MTU";
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = 14;
  mask = IBV_QP_STATE;
  verbs::apply_qp_settings(s, rts, mask);
  EXPECT_EQ(rts.timeout, 16);
  EXPECT_EQ(rts.retry_cnt, 6);
  EXPECT_EQ(rts.rnr_retry, 7);
  EXPECT_EQ(mask & (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY),
            IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
}

// Packets lost fewer times than retry_cnt are retried and delivered; more lose the peer.
TEST(VerbsEmulated, LostPacketsAreRetriedAndTooManyLoseThePeer) {
  Config config = emulated();
  config.ib_timeout = 10;  // 4 ms per try
  config.ib_retry_cnt = 3;
  World w = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  Route& r = w.r;
  ASSERT_TRUE(
      drive(t, seen, [&] { return count(seen[0], TransportCompletion::Kind::kWriteDone); }));
  ASSERT_TRUE(verbs::emu::inject_drop(qp_of(*t[0], 1, 2), 3).ok());
  std::memcpy(r.src->data(), "retried!", 8);
  ASSERT_TRUE(t[0]->write(*r.src, 0, *r.remote, 0, 8, 2, 2).ok());
  ASSERT_TRUE(
      drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify) == 2; }));
  EXPECT_EQ(std::memcmp(r.dst->data(), "retried!", 8), 0);
  EXPECT_FALSE(lost(seen[0], 1));
  ASSERT_TRUE(verbs::emu::inject_drop(qp_of(*t[0], 1, 2), 4).ok());  // retry_cnt + 1 tries lost
  ASSERT_TRUE(t[0]->write(*r.src, 0, *r.remote, 0, 8, 3, 3).ok());
  EXPECT_TRUE(drive(t, seen, [&] { return lost(seen[0], 1); }));
  EXPECT_EQ(count(seen[1], TransportCompletion::Kind::kNotify), 2u);
}

// Credit updates ask the NIC for a completion once per 32 send requests (every request was
// signaled: a DMA and a poll() read each, for nothing); writes and notifies still ask every
// time. close() does not wait for an unsignaled tail of credit updates: their peer may have
// closed first, and nothing would ever complete them.
TEST(VerbsEmulated, CreditUpdatesAreSignaledOncePerManyAndCloseDoesNotWaitForThem) {
  const Config config = emulated();
  World w = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  ASSERT_TRUE(
      drive(t, seen, [&] { return count(seen[0], TransportCompletion::Kind::kWriteDone); }));
  const verbs::emu::QpRef sender = qp_of(*t[0], 1, 2);
  const verbs::emu::QpRef receiver = qp_of(*t[1], 0, 2);  // it sends the credit updates
  auto sent_before = verbs::emu::qp_attributes(sender);
  auto returned_before = verbs::emu::qp_attributes(receiver);
  ASSERT_TRUE(sent_before.ok() && returned_before.ok());
  constexpr int kNotifies = 400;  // 25 credit updates (one per 16 receives)
  for (int i = 0; i < kNotifies; ++i) {
    ASSERT_TRUE(post(t, seen, [&] { return t[0]->notify(1, 100 + i); }).ok());
  }
  ASSERT_TRUE(drive(t, seen, [&] {
    return count(seen[1], TransportCompletion::Kind::kNotify) == 1 + kNotifies;
  }));
  auto sent = verbs::emu::qp_attributes(sender);
  auto returned = verbs::emu::qp_attributes(receiver);
  ASSERT_TRUE(sent.ok() && returned.ok());
  EXPECT_EQ(sent.value().send_completions - sent_before.value().send_completions,
            uint64_t{kNotifies})
      << "a notify must complete visibly (close() waits for exit notices)";
  EXPECT_LE(returned.value().send_completions - returned_before.value().send_completions, 1u)
      << "every credit update asked for a completion";
  EXPECT_FALSE(lost(seen[0], 1));
  EXPECT_FALSE(lost(seen[1], 0));
  // Rank 0 goes first, as in a normal shutdown; rank 1 has not polled since.
  t[0]->close();
  const auto start = std::chrono::steady_clock::now();
  t[1]->close();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms)
      << "close() waited out its drain limit (2 s) for credit updates nobody will complete";
}

// A credit update posted unsignaled and lost (retry_cnt + 1 tries) still fails the peer: errors
// complete even unsignaled.
TEST(VerbsEmulated, ALostUnsignaledCreditUpdateLosesThePeer) {
  Config config = emulated();
  config.ib_timeout = 10;  // 4 ms per try
  config.ib_retry_cnt = 3;
  World w = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  ASSERT_TRUE(verbs::emu::inject_drop(qp_of(*t[1], 0, 2), 4).ok());
  // 16 receives make rank 1 return credits (its first send on this QP: unsignaled).
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(post(t, seen, [&] { return t[0]->notify(1, 100 + i); }).ok());
  }
  EXPECT_TRUE(drive(t, seen, [&] { return lost(seen[1], 0); }))
      << "the error completion of an unsignaled credit update was not acted on";
}

// A port that goes down and comes back within the retry window loses nothing (the async event
// is logged, not taken for a failure); one that stays down loses the peers it writes to.
TEST(VerbsEmulated, APortThatFlapsLosesNothingAndOneThatStaysDownLosesThePeer) {
  Config config = emulated();
  config.ib_timeout = 16;  // 268 ms per try: a window of seconds, far beyond the flap
  World w = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w.ok);
  auto& t = w.t;
  auto& seen = w.seen;
  Route& r = w.r;
  const uint32_t lid = qp_of(*t[0], 1, 2).lid;
  ASSERT_TRUE(verbs::emu::set_port_state(lid, verbs::emu::PortState::kDown).ok());
  ASSERT_TRUE(t[0]->write(*r.src, 0, *r.remote, 0, 8, 2, 2).ok());
  for (int i = 0; i < 50; ++i) {  // the async event is read meanwhile
    TransportCompletion buf[16];
    const size_t n = t[0]->poll(buf);
    seen[0].insert(seen[0].end(), buf, buf + n);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(verbs::emu::set_port_state(lid, verbs::emu::PortState::kActive).ok());
  ASSERT_TRUE(
      drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify) == 2; }));
  EXPECT_FALSE(lost(seen[0], 1));

  config.ib_timeout = 8;  // 1 ms per try
  config.ib_retry_cnt = 1;
  World w2 = world_with_a_write(2, config, 0, 1);
  ASSERT_TRUE(w2.ok);
  auto& t2 = w2.t;
  auto& seen2 = w2.seen;
  Route& r2 = w2.r;
  ASSERT_TRUE(
      drive(t2, seen2, [&] { return count(seen2[1], TransportCompletion::Kind::kNotify); }));
  ASSERT_TRUE(
      verbs::emu::set_port_state(qp_of(*t2[0], 1, 2).lid, verbs::emu::PortState::kDown).ok());
  ASSERT_TRUE(t2[0]->write(*r2.src, 0, *r2.remote, 0, 8, 2, 2).ok());
  EXPECT_TRUE(drive(t2, seen2, [&] { return lost(seen2[0], 1); }));
}

// The emulated device memory is what GPU memory is to the CPU: a load through its pointer
// faults. (So the test below would crash, not pass, if the transport sent it inline.)
TEST(VerbsEmulatedDeathTest, DeviceMemoryFaultsWhenTheCpuReadsIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto m = verbs::emu::DeviceMemory::allocate(4096);
  ASSERT_TRUE(m.ok());
  const uint8_t pattern[4] = {1, 2, 3, 4};
  ASSERT_TRUE(m.value().copy_in(0, pattern, 4).ok());
  uint8_t back[4] = {};
  ASSERT_TRUE(m.value().copy_out(0, back, 4).ok());
  EXPECT_EQ(std::memcmp(back, pattern, 4), 0);
  EXPECT_FALSE(m.value().copy_in(4090, pattern, 8).ok()) << "out of range";
  EXPECT_DEATH(
      {
        volatile const uint8_t* p = static_cast<const uint8_t*>(m.value().data());
        std::printf("%d\n", p[0]);
      },
      "");
}

// Defect 1: a write from GPU memory that fits inline was posted with IBV_SEND_INLINE, and the
// provider copied it with the CPU from a device pointer: SIGSEGV in ibv_post_send. Writes of
// device memory of every size, inline-sized ones included, go by DMA.
TEST(VerbsEmulated, DeviceMemoryIsNeverSentInline) {
  const Config config = emulated();
  auto t = connected_world(2, config);
  ASSERT_EQ(t.size(), 2u);
  constexpr size_t kBytes = 8192;
  auto memory = verbs::emu::DeviceMemory::allocate(kBytes);
  ASSERT_TRUE(memory.ok());
  std::vector<uint8_t> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<uint8_t>(i * 13 + 5);
  ASSERT_TRUE(memory.value().copy_in(0, pattern.data(), kBytes).ok());
  auto bad = t[0]->register_memory(memory.value().data(), kBytes, MemoryKind::kHost);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << "device memory is not host's";
  auto src = t[0]->register_memory(memory.value().data(), kBytes, MemoryKind::kCuda);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto dst = t[1]->allocate(kBytes, MemoryKind::kHost);
  ASSERT_TRUE(dst.ok());
  auto remote = t[0]->import_region(1, dst.value()->remote_key());
  ASSERT_TRUE(remote.ok());
  std::vector<std::vector<TransportCompletion>> seen(2);
  const size_t sizes[] = {1, 8, 64, 4096};
  size_t offset = 0;
  uint32_t tag = 0;
  for (const size_t n : sizes) {
    ASSERT_TRUE(post(t, seen, [&] {
                  return t[0]->write(*src.value(), offset, *remote.value(), offset, n, tag, tag);
                }).ok());
    offset += n;
    ++tag;
  }
  ASSERT_TRUE(
      drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify) == 4; }));
  EXPECT_EQ(std::memcmp(dst.value()->data(), pattern.data(), offset), 0);
  EXPECT_FALSE(lost(seen[0], 1));
}

// Defect 7: ibv_fork_init was never called; a fork after registration (DataLoader workers)
// corrupts registered memory on kernels before 5.13. The emulated device needs it, as such a
// kernel does, and refuses it after a registration, as rdma-core does.
TEST(VerbsEmulated, ForkProtectionIsEnabledBeforeTheFirstRegistration) {
  const verbs::VerbsApi& api = verbs::emulated_verbs_api();
  verbs::emu::reset_fork_state();
  ASSERT_EQ(api.is_fork_initialized(), IBV_FORK_DISABLED);
  {
    const Config config = emulated();
    auto t = connected_world(2, config);
    ASSERT_EQ(t.size(), 2u);
    EXPECT_EQ(api.is_fork_initialized(), IBV_FORK_ENABLED);
  }
  // Too late: something registered memory without it first.
  verbs::emu::reset_fork_state();
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  ASSERT_EQ(n, 1);
  ibv_context* ctx = api.open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = api.alloc_pd(ctx);
  std::vector<uint8_t> buffer(4096);
  ibv_mr* mr = api.reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const verbs::ForkProtectionResult r = verbs::enable_fork_protection(api);
  EXPECT_EQ(r.state, verbs::ForkProtection::kFailed);
  EXPECT_NE(r.why.find("RDMAV_FORK_SAFE"), std::string::npos) << r.why;
  api.dereg_mr(mr);
  api.dealloc_pd(pd);
  api.close_device(ctx);
  api.free_device_list(list);
  verbs::emu::reset_fork_state();
}

// The port's max_msg_sz is checked before posting (a longer write would fail the QP with a
// local length error, and the peer with it).
TEST(VerbsEmulated, AWriteAboveThePortsMaxMessageSizeIsAClearError) {
  verbs::emu::set_max_message(4096);
  const Config config = emulated();
  auto t = connected_world(2, config);
  verbs::emu::set_max_message(1u << 31);
  ASSERT_EQ(t.size(), 2u);
  std::vector<std::vector<TransportCompletion>> seen(2);
  Route r = route(t, 0, 1, 8192);
  ASSERT_NE(r.remote, nullptr);
  const Status too_long = t[0]->write(*r.src, 0, *r.remote, 0, 4097, 1, 1);
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("max message size"), std::string::npos) << too_long.to_string();
  ASSERT_TRUE(post(t, seen, [&] { return t[0]->write(*r.src, 0, *r.remote, 0, 4096, 2, 2); }).ok());
  ASSERT_TRUE(drive(t, seen, [&] { return count(seen[1], TransportCompletion::Kind::kNotify); }));
  EXPECT_FALSE(lost(seen[0], 1));
}

// A killed process's rdma_cm inbox (/dev/shm/eagercomm-vemucm-<uid>-<port>) was left behind
// for good; the next channel made on the host removes it, and never a live channel's.
TEST(VerbsEmulated, AKilledProcessesCmInboxIsReclaimedByTheNextChannel) {
  const verbs::VerbsApi& api = verbs::emulated_verbs_api();
  rdma_event_channel* live = api.create_event_channel();
  ASSERT_NE(live, nullptr);
  const std::filesystem::path live_inbox = "/dev/shm" + verbs::emu::inbox_name_of(live);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // makes a channel and dies without destroying it
    rdma_event_channel* c = api.create_event_channel();
    const std::string name = c != nullptr ? verbs::emu::inbox_name_of(c) : "";
    (void)!write(fds[1], name.data(), name.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[128] = {};
  const ssize_t got = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_GT(got, 0) << "the child made no channel";
  const std::filesystem::path dead_inbox = std::string("/dev/shm") + buf;
  ASSERT_TRUE(std::filesystem::exists(dead_inbox)) << dead_inbox;
  rdma_event_channel* next = api.create_event_channel();
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(std::filesystem::exists(dead_inbox)) << "the dead process's inbox is still there";
  EXPECT_TRUE(std::filesystem::exists(live_inbox)) << "a live channel's inbox was removed";
  api.destroy_event_channel(next);
  api.destroy_event_channel(live);
  EXPECT_FALSE(std::filesystem::exists(live_inbox));
}

#else

TEST(VerbsEmulated, NeedsLibibverbsHeaders) { GTEST_SKIP() << "built without libibverbs headers"; }

#endif

}  // namespace
}  // namespace eagercomm
