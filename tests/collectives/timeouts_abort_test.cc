// Per-call timeouts, the straggler report and Communicator::abort(), with ranks as threads.
// (Stopped and killed processes are tests/system/faults_test.sh's.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/deadline.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(Timeouts, ABlockingCollectiveThatTimesOutIsAbandonedOnEveryRank) {
  auto w = World::make(2, test_config());
  ASSERT_EQ(w->size(), 2);
  // 3000 floats: above the small boxes, whose peers may complete from data already deposited.
  std::vector<float> x(3000, 1.0f), y(3000, 2.0f);
  // Rank 1 is not there: rank 0 gives up after its own 200 ms, not EAGERCOMM_TIMEOUT.
  const auto start = std::chrono::steady_clock::now();
  Status s = (*w)[0].allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                               milliseconds(200));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_TRUE(contains(s, "within 200ms")) << s.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(30));
  EXPECT_EQ(x[0], 1.0f);  // nothing was written after the call returned
  // Rank 1 arrives late: the abandoned collective fails there too, with rank 0's report.
  Status late = (*w)[1].allreduce(y.data(), y.data(), y.size(), DataType::kFloat32, ReduceOp::kSum,
                                  seconds(60));
  EXPECT_EQ(late.code(), StatusCode::kTimeout) << late.to_string();
  EXPECT_TRUE(contains(late, "rank 0 reported")) << late.to_string();
  // The communicator goes on: the next collective works everywhere.
  w->run([](int r, Communicator& c) {
    std::vector<int32_t> v(100, r + 1);
    Status ok = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
    EXPECT_TRUE(ok.ok()) << ok.to_string();
    EXPECT_EQ(v[99], 3);
  });
}

TEST(Timeouts, EveryBlockingCallTakesItsOwnTimeout) {
  auto w = World::make(2, test_config());
  ASSERT_EQ(w->size(), 2);
  Communicator& c = (*w)[0];
  std::vector<float> x(64, 1.0f), all(128);
  EXPECT_EQ(c.broadcast(x.data(), x.size(), DataType::kFloat32, 1, milliseconds(100)).code(),
            StatusCode::kTimeout);
  EXPECT_EQ(
      c.allgather(x.data(), all.data(), x.size(), DataType::kFloat32, milliseconds(100)).code(),
      StatusCode::kTimeout);
  EXPECT_EQ(c.barrier(milliseconds(100)).code(), StatusCode::kTimeout);
  // A small allreduce (the inline path) as well.
  EXPECT_EQ(
      c.allreduce(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kSum, milliseconds(100))
          .code(),
      StatusCode::kTimeout);
  // Rank 1 makes the same calls: each fails with rank 0's report, none waits for long.
  Communicator& d = (*w)[1];
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(d.broadcast(x.data(), x.size(), DataType::kFloat32, 1, seconds(60)).ok());
  EXPECT_FALSE(d.allgather(x.data(), all.data(), x.size(), DataType::kFloat32, seconds(60)).ok());
  EXPECT_FALSE(d.barrier(seconds(60)).ok());
  EXPECT_FALSE(
      d.allreduce(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kSum, seconds(60)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(30));
  w->run([](int, Communicator& comm) { EXPECT_TRUE(comm.barrier().ok()); });
}

TEST(Timeouts, TheErrorNamesTheRanksThatHadNotStarted) {
  Config config = test_config({{"EAGERCOMM_TRANSPORT", "shm"}, {"EAGERCOMM_HEARTBEAT", "100ms"}});
  // Over shm (not inproc): heartbeats run there, so timeouts can report who had not arrived.
  auto comms = shm_world(3, config, "straggler" + std::to_string(getpid()));
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  // Heartbeats carry how far each rank got; give them time to arrive.
  std::this_thread::sleep_for(milliseconds(400));
  std::vector<float> x(2048, 1.0f);
  Status s0, s1;
  std::thread t1([&] {
    std::vector<float> y(2048, 1.0f);
    s1 = comms[1]->allreduce(y.data(), y.data(), y.size(), DataType::kFloat32, ReduceOp::kSum,
                             seconds(2));
  });
  s0 = comms[0]->allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                           seconds(2));
  t1.join();
  for (const Status* s : {&s0, &s1}) {
    EXPECT_EQ(s->code(), StatusCode::kTimeout) << s->to_string();
  }
  // Rank 2 never called; it is alive (its heartbeats arrive), so it is a straggler.
  EXPECT_TRUE(contains(s0, "had not started it: rank 2 (alive, no collective started yet)") ||
              contains(s0, "rank 1 reported"))
      << s0.to_string();
  EXPECT_TRUE(contains(s0, "rank 2 (alive") || contains(s1, "rank 2 (alive"))
      << s0.to_string() << " / " << s1.to_string();
  for (auto& c : comms) c->destroy();
}

// One spelling per meaning, as in the C API and Python (communicator.h, "Timeouts"):
// kConfiguredTimeout (0) is EAGERCOMM_TIMEOUT, kWaitForever (and -1ns, the C API's old -1) no
// limit, other negative values refused.
TEST(Timeouts, ConfiguredForeverAndRefusedSpellings) {
  auto w = World::make(2, test_config({{"EAGERCOMM_TIMEOUT", "200ms"}}));
  ASSERT_EQ(w->size(), 2);
  EXPECT_EQ(kConfiguredTimeout, std::chrono::nanoseconds::zero());
  EXPECT_EQ((*w)[0].configured_timeout(), milliseconds(200));
  // 0 is EAGERCOMM_TIMEOUT: rank 0 alone gives up after 200 ms.
  std::vector<float> x(3000, 1.0f);
  Status s = (*w)[0].allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                               std::chrono::nanoseconds(0));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  EXPECT_TRUE(contains(s, "within 200ms")) << s.to_string();
  Status late = (*w)[1].allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                                  seconds(60));
  EXPECT_EQ(late.code(), StatusCode::kTimeout) << late.to_string();
  // Refused before anything starts, on one rank alone, naming the spellings.
  for (auto bad : {std::chrono::nanoseconds(-2), std::chrono::nanoseconds::min()}) {
    Status b = (*w)[0].barrier(bad);
    EXPECT_EQ(b.code(), StatusCode::kInvalidArgument) << b.to_string();
    EXPECT_TRUE(contains(b, "kWaitForever")) << b.to_string();
  }
  w->run([](int, Communicator& c) {
    auto req = c.barrier_async();
    ASSERT_TRUE(req.ok());
    Status refused = req.value().wait(std::chrono::nanoseconds(-7));
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.to_string();
    EXPECT_TRUE(req.value().wait().ok());
  });
  // kWaitForever and -1ns outlast EAGERCOMM_TIMEOUT: rank 1 arrives 400 ms late.
  w->run([](int r, Communicator& c) {
    for (auto forever : {kWaitForever, std::chrono::nanoseconds(-1)}) {
      if (r == 1) std::this_thread::sleep_for(milliseconds(400));
      std::vector<float> v(3000, 1.0f);
      Status a =
          c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, forever);
      EXPECT_TRUE(a.ok()) << a.to_string();
      EXPECT_EQ(v[2999], 2.0f);
    }
  });
  // EAGERCOMM_TIMEOUT=0 is that variable's "no limit": the communicator reports kWaitForever.
  auto unlimited = World::make(1, test_config({{"EAGERCOMM_TIMEOUT", "0"}}));
  ASSERT_EQ(unlimited->size(), 1);
  EXPECT_EQ((*unlimited)[0].configured_timeout(), kWaitForever);
}

// A timeout too large for the clock means "forever", never "already past" (issue 16: an
// EAGERCOMM_TIMEOUT of 2^63-1 ns made every call time out at once).
TEST(Timeouts, TimeoutsTooLargeForTheClockSaturate) {
  const auto now = std::chrono::steady_clock::now();
  using TimePoint = std::chrono::steady_clock::time_point;
  EXPECT_EQ(deadline_after(std::chrono::nanoseconds::max(), now), TimePoint::max());
  // Near the clock's end, whatever the clock's epoch: far in the future, never in the past.
  EXPECT_GT(deadline_after(std::chrono::hours(2562047), now), now + std::chrono::hours(2000000));
  EXPECT_EQ(deadline_after(std::chrono::nanoseconds::zero(), now), TimePoint::max());
  EXPECT_EQ(deadline_after(milliseconds(-5), now), TimePoint::max());
  EXPECT_EQ(deadline_after(seconds(3), now), now + seconds(3));

  for (const char* huge : {"9223372036854775807ns", "2562047h"}) {
    SCOPED_TRACE(huge);
    auto w = World::make(2, test_config({{"EAGERCOMM_TIMEOUT", huge}}));
    ASSERT_EQ(w->size(), 2);
    // Both forms of the call: EAGERCOMM_TIMEOUT and the same value passed per call. Rank 1
    // arrives 300 ms late; rank 0 must wait for it, not give up at once.
    w->run([](int r, Communicator& c) {
      if (r == 1) std::this_thread::sleep_for(milliseconds(300));
      std::vector<float> small(4, 1.0f), large(3000, 1.0f);
      Status a =
          c.allreduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum);
      EXPECT_TRUE(a.ok()) << a.to_string();
      if (r == 1) std::this_thread::sleep_for(milliseconds(300));
      Status b = c.allreduce(large.data(), large.data(), large.size(), DataType::kFloat32,
                             ReduceOp::kSum, std::chrono::nanoseconds::max());
      EXPECT_TRUE(b.ok()) << b.to_string();
      if (r == 1) std::this_thread::sleep_for(milliseconds(300));
      EXPECT_TRUE(c.barrier().ok());
      EXPECT_EQ(small[0], 2.0f);
      EXPECT_EQ(large[2999], 2.0f);
    });
  }
}

TEST(Abort, FromAnotherThreadUnblocksTheWaiterWithTheReason) {
  auto w = World::make(2, test_config());
  ASSERT_EQ(w->size(), 2);
  std::vector<float> x(3000, 1.0f);
  Status waited;
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    // No timeout: only abort() can end this wait (rank 1 does not call).
    waited = (*w)[0].allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum,
                               kWaitForever);
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(returned.load());
  // Several threads abort at once: one does it, every call returns once it is done.
  std::vector<std::thread> aborters;
  for (int i = 0; i < 3; ++i) {
    aborters.emplace_back([&] { (*w)[0].abort("the operator pressed stop"); });
  }
  for (auto& t : aborters) t.join();
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.to_string();
  EXPECT_TRUE(contains(waited, "the operator pressed stop")) << waited.to_string();
  // Later calls fail the same way, at once.
  Status later = (*w)[0].barrier();
  EXPECT_EQ(later.code(), StatusCode::kAborted);
  EXPECT_TRUE(contains(later, "the operator pressed stop")) << later.to_string();
  EXPECT_FALSE(
      (*w)[0].allreduce_async(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kSum).ok());
  // The peer learns that rank 0 is gone instead of waiting for it.
  std::vector<float> y(3000, 1.0f);
  Status peer = (*w)[1].allreduce(y.data(), y.data(), y.size(), DataType::kFloat32, ReduceOp::kSum,
                                  seconds(60));
  EXPECT_EQ(peer.code(), StatusCode::kPeerFailed) << peer.to_string();
  EXPECT_TRUE(contains(peer, "rank 0")) << peer.to_string();
  (*w)[0].abort("again");  // idempotent
  (*w)[0].destroy();
}

TEST(Abort, ReachesTheWaitersOfAsyncRequests) {
  auto w = World::make(3, test_config());
  ASSERT_EQ(w->size(), 3);
  std::vector<float> x(1000, 1.0f);
  auto req =
      (*w)[2].allreduce_async(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
  ASSERT_TRUE(req.ok());
  Status waited;
  std::thread waiter([&] { waited = req.value().wait(kWaitForever); });
  std::this_thread::sleep_for(milliseconds(50));
  (*w)[2].abort("shutting down");
  waiter.join();
  EXPECT_EQ(waited.code(), StatusCode::kAborted);
  EXPECT_TRUE(contains(waited, "shutting down")) << waited.to_string();
}

}  // namespace
}  // namespace eagercomm::test
