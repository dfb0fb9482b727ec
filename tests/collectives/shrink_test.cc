// Communicator::shrink(): the survivors of a failure agree on one membership and go on with it,
// with ranks as threads (killed processes: tests/system/continue_test.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/partial_allreduce.h"
#include "tests/harness/forwarding_store.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

using std::chrono::seconds;

Config shrink_config() { return test_config({{"EAGERCOMM_TIMEOUT", "20s"}}); }

// Rank `dead` leaves by abort() and this returns true there; the others' next allreduce meets
// the death (fails) and this returns false.
bool dies_or_meets_the_death(int r, int dead, Communicator& c) {
  if (r == dead) {
    c.abort("killed by the test");
    return true;
  }
  std::vector<float> v(1000, 1.0f);
  EXPECT_FALSE(c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).ok());
  return false;
}

// Rank `dead` leaves by abort() (its peers see what they see of a crash: kPeerFailed naming it);
// the others' next allreduce fails, they shrink and their allreduces sum over the members only.
void check_survivors_go_on(int size, int dead) {
  auto w = World::make(size, shrink_config());
  ASSERT_EQ(w->size(), size);
  w->run([&](int r, Communicator& c) {
    if (r == dead) {
      c.abort("killed by the test");
      return;
    }
    std::vector<int> everyone(size);
    for (int q = 0; q < size; ++q) everyone[q] = q;
    EXPECT_EQ(c.former_ranks(), everyone);
    std::vector<int64_t> v(300, r + 1);
    Status failed = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    EXPECT_EQ(failed.code(), StatusCode::kPeerFailed) << failed.to_string();
    Result<std::vector<int>> members = c.shrink();
    ASSERT_TRUE(members.ok()) << members.status().to_string();
    EXPECT_EQ(c.former_ranks(), members.value());
    std::vector<int> expected;
    for (int q = 0; q < size; ++q) {
      if (q != dead) expected.push_back(q);
    }
    EXPECT_EQ(members.value(), expected);
    EXPECT_EQ(c.size(), size - 1);
    EXPECT_EQ(c.rank(), r < dead ? r : r - 1);
    EXPECT_EQ(c.generation(), 1u);
    // The new group works, for every kind of collective.
    std::vector<int64_t> x(5000, r + 1);
    Status ok = c.allreduce(x.data(), x.data(), x.size(), DataType::kInt64, ReduceOp::kSum);
    ASSERT_TRUE(ok.ok()) << ok.to_string();
    const int64_t want = size * (size + 1) / 2 - (dead + 1);
    EXPECT_EQ(x[0], want);
    EXPECT_EQ(x[4999], want);
    int64_t root_value = r == expected[0] ? 77 : 0;
    ok = c.broadcast(&root_value, 1, DataType::kInt64, 0);
    ASSERT_TRUE(ok.ok()) << ok.to_string();
    EXPECT_EQ(root_value, 77);
    std::vector<int32_t> all(size - 1, -1);
    const int32_t mine = r;
    ok = c.allgather(&mine, all.data(), 1, DataType::kInt32);
    ASSERT_TRUE(ok.ok()) << ok.to_string();
    for (int q = 0; q < size - 1; ++q) EXPECT_EQ(all[q], expected[q]);
    EXPECT_TRUE(c.barrier().ok());
  });
}

TEST(Shrink, SurvivorsGoOnWithoutADeadRank) {
  check_survivors_go_on(4, 2);
  check_survivors_go_on(5, 0);
  check_survivors_go_on(3, 2);
}

TEST(Shrink, TwoFailuresInTurn) {
  auto w = World::make(5, shrink_config());
  ASSERT_EQ(w->size(), 5);
  w->run([&](int r, Communicator& c) {
    for (int dead : {1, 3}) {  // rank 3 of the first world is rank 2 of the second
      const int my_rank = c.rank();
      if (my_rank == (dead == 1 ? 1 : 2) && r == dead) {
        c.abort("killed by the test");
        return;
      }
      std::vector<int32_t> v(1000, 1);
      Status failed = c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(failed.code(), StatusCode::kPeerFailed) << failed.to_string();
      Result<std::vector<int>> members = c.shrink();
      ASSERT_TRUE(members.ok()) << members.status().to_string();
    }
    EXPECT_EQ(c.size(), 3);
    EXPECT_EQ(c.generation(), 2u);
    std::vector<int32_t> v(1000, r);
    ASSERT_TRUE(c.allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(v[0], 0 + 2 + 4);
  });
}

// A rank that does not come to the shrink within the timeout is left out, and says so when it
// comes late; the others go on without it.
TEST(Shrink, ARankThatDoesNotComeIsLeftOut) {
  auto w = World::make(4, test_config({{"EAGERCOMM_TIMEOUT", "2s"}}));
  ASSERT_EQ(w->size(), 4);
  std::atomic<int> shrunk{0};
  w->run([&](int r, Communicator& c) {
    if (r == 3) {
      c.abort("killed by the test");
      return;
    }
    std::vector<float> v(1000, 1.0f);
    (void)c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    if (r == 2) {
      // Late: after the others have decided without it.
      while (shrunk.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      Result<std::vector<int>> members = c.shrink();
      ASSERT_FALSE(members.ok());
      EXPECT_EQ(members.status().code(), StatusCode::kPeerFailed);
      EXPECT_NE(members.status().message().find("rank 2 was left out"), std::string::npos)
          << members.status().to_string();
      return;
    }
    Result<std::vector<int>> members = c.shrink();
    ASSERT_TRUE(members.ok()) << members.status().to_string();
    EXPECT_EQ(members.value(), (std::vector<int>{0, 1}));
    ++shrunk;
    std::vector<float> x(10, 1.0f);
    ASSERT_TRUE(c.allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(x[0], 2.0f);
  });
}

// A store that loses the first shrink's members, as if the rank deciding them had died before
// publishing them.
class LosesTheFirstMembers final : public ForwardingStore {
 public:
  Status set(const std::string& key, const Bytes& value) override {
    if (key.ends_with("/members") && !lost_.exchange(true)) return Status::Ok();
    return inner_.set(key, value);
  }

 private:
  std::atomic<bool> lost_{false};
};

// A shrink that fails (nobody published its members) says so on every caller and leaves the
// communicator as it was; the next shrink() agrees afresh, under keys of its own (it used to
// reuse the failed one's, where the decider's ticket was taken: nobody decided again).
TEST(Shrink, AFailedShrinkCanBeCalledAgain) {
  const Config config = test_config({{"EAGERCOMM_TIMEOUT", "1s"}});
  LosesTheFirstMembers store;
  std::vector<std::unique_ptr<Communicator>> comms(3);
  run_threads(3, [&](int r) {
    CommunicatorOptions opts;
    opts.config = &config;
    opts.scope = "shrink-again";
    auto c = Communicator::create(store, r, 3, opts);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    comms[r] = std::move(c).value();
  });
  run_threads(3, [&](int r) {
    Communicator& c = *comms[r];
    if (dies_or_meets_the_death(r, 2, c)) return;
    Result<std::vector<int>> failed = c.shrink();
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.status().message().find("found no members published"), std::string::npos)
        << failed.status().to_string();
    EXPECT_EQ(c.generation(), 0u);
    Result<std::vector<int>> members = c.shrink();
    ASSERT_TRUE(members.ok()) << members.status().to_string();
    EXPECT_EQ(members.value(), (std::vector<int>{0, 1}));
    EXPECT_EQ(c.generation(), 1u);
    EXPECT_EQ(c.former_ranks(), members.value());
    std::vector<float> x(10, 1.0f);
    ASSERT_TRUE(c.allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(x[0], 2.0f);
  });
}

// A create() that met the failure had taken a stream id on its rank only; the shrink takes the
// largest id any member took, so objects made afterwards get the same id everywhere (before,
// rank 0's was one more than rank 1's and their rounds never met).
TEST(Shrink, ObjectsCreatedAfterAShrinkAgreeOnTheirStream) {
  auto w = World::make(3, test_config({{"EAGERCOMM_TIMEOUT", "5s"}}));
  ASSERT_EQ(w->size(), 3);
  w->run([&](int r, Communicator& c) {
    if (r == 2) {
      c.abort("killed by the test");
      return;
    }
    if (r == 0) {
      auto met = PartialAllreduce::create(c, 4, DataType::kFloat32, PartialMode::sync());
      EXPECT_FALSE(met.ok());
    } else {
      std::vector<float> v(100, 1.0f);
      EXPECT_FALSE(
          c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).ok());
    }
    Result<std::vector<int>> members = c.shrink();
    ASSERT_TRUE(members.ok()) << members.status().to_string();
    auto pa = PartialAllreduce::create(c, 4, DataType::kFloat32, PartialMode::sync());
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    const std::vector<float> g(4, 1.0f);
    ASSERT_TRUE(pa.value()->post(g.data(), g.size(), DataType::kFloat32).ok());
    Result<RoundResult> round = pa.value()->wait();
    ASSERT_TRUE(round.ok()) << round.status().to_string();
    std::vector<float> out(4);
    ASSERT_TRUE(round.value().copy_to(out.data()).ok());
    EXPECT_EQ(out[0], 2.0f);
  });
}

// abort() from another thread (a watchdog) while shrink() runs: the shrink ends with kAborted
// quoting the reason, and the communicator stays aborted; the other survivor goes on. (abort()
// read the engine that shrink() replaces without synchronization, and was lost on the old one.)
TEST(Shrink, AnAbortWhileShrinkingEndsIt) {
  auto w = World::make(3, test_config({{"EAGERCOMM_TIMEOUT", "3s"}}));
  ASSERT_EQ(w->size(), 3);
  std::atomic<bool> shrinking{false};
  std::thread watchdog([&] {
    while (!shrinking.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    (*w)[0].abort("the watchdog gave up");
  });
  w->run([&](int r, Communicator& c) {
    if (dies_or_meets_the_death(r, 2, c)) return;
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 waits in its shrink
      Result<std::vector<int>> members = c.shrink();
      EXPECT_TRUE(members.ok()) << members.status().to_string();
      return;
    }
    shrinking = true;
    Result<std::vector<int>> members = c.shrink();
    ASSERT_FALSE(members.ok());
    EXPECT_EQ(members.status().code(), StatusCode::kAborted) << members.status().to_string();
    EXPECT_NE(members.status().message().find("the watchdog gave up"), std::string::npos)
        << members.status().to_string();
    float x = 1;
    const Status after = c.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(after.code(), StatusCode::kAborted) << after.to_string();
  });
  watchdog.join();
}

TEST(Shrink, BadArgumentsAreRefused) {
  auto w = World::make(2, shrink_config());
  ASSERT_EQ(w->size(), 2);
  Result<std::vector<int>> bad = w->comms[0]->shrink(std::chrono::nanoseconds(-5));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
}

}  // namespace
}  // namespace eagercomm::test
