// The verbs transport on the emulated RDMA device (transport/verbs/emulated): the real transport
// code creating, connecting (store path) and writing over queue pairs, and the device's own
// rules (access errors, the QP state machine, RNR, flush errors) that the transport must face.
//
// One program, several files by job: here the device's listing, writes and notifications on
// both connection paths, credit updates, device memory, fork protection, the port's maximum
// message size and the rdma_cm inboxes; verbs_emulated_test_qp.cc: queue-pair attributes
// and numbers, the address's GID type; verbs_emulated_test_faults.cc: the faults that lose a
// peer (or must not). The shared helpers: verbs_emulated_test.h.
#include <gtest/gtest.h>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_VERBS
#include <arpa/inet.h>
#include <netinet/in.h>

#include "tests/transport/verbs_emulated_test.h"
#endif

namespace eagercomm::test::verbs_emulated_test {
namespace {

#if EAGERCOMM_HAVE_VERBS

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
  const verbs::emu::QpRef sender = qp_of(t, 0, 1);
  const verbs::emu::QpRef receiver = qp_of(t, 1, 0);  // it sends the credit updates
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

// As the kernel does (ucma_destroy_id), destroying an id drops its events not yet taken: a
// connection given up after crossing requests destroys its id with an address or route
// resolution still queued, and get_cm_event must never hand out an event naming a freed id.
TEST(VerbsEmulated, DestroyingAnIdDropsItsEventsNotYetTaken) {
  const verbs::VerbsApi& api = verbs::emulated_verbs_api();
  rdma_event_channel* ch = api.create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* kept = nullptr;
  rdma_cm_id* dropped = nullptr;
  ASSERT_EQ(api.create_id(ch, &kept, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(api.create_id(ch, &dropped, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  dst.sin_port = htons(9);  // nobody listens: an ADDR_ERROR event, queued all the same
  ASSERT_EQ(api.resolve_addr(dropped, nullptr, reinterpret_cast<sockaddr*>(&dst), 100), 0);
  ASSERT_EQ(api.resolve_addr(kept, nullptr, reinterpret_cast<sockaddr*>(&dst), 100), 0);
  ASSERT_EQ(api.destroy_id(dropped), 0);
  rdma_cm_event* e = nullptr;
  ASSERT_EQ(api.get_cm_event(ch, &e), 0);
  EXPECT_EQ(e->id, kept);
  api.ack_cm_event(e);
  EXPECT_NE(api.get_cm_event(ch, &e), 0) << "an event of the destroyed id was handed out";
  api.destroy_id(kept);
  api.destroy_event_channel(ch);
}

#else

TEST(VerbsEmulated, NeedsLibibverbsHeaders) { GTEST_SKIP() << "built without libibverbs headers"; }

#endif

}  // namespace
}  // namespace eagercomm::test::verbs_emulated_test
