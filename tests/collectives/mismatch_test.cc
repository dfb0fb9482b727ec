// Every mismatched pair of collective calls (tests/collectives/mismatch_cases.h) fails with
// kMismatch on every rank at once, with ranks as threads over inproc and over shm: both map their
// memory, so small allreduces go through the boxes, where a peer running another collective once
// waited unseen until the timeout (issue 16).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tests/collectives/mismatch_cases.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

// Generous for a loaded 2-core machine and the sanitizers; a call that waits for its timeout
// (four times this) fails.
constexpr std::chrono::seconds kPatience(15);

// (ranks, the rank making the other call)
class MismatchOverInproc : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(MismatchOverInproc, EveryPairFailsOnEveryRankAtOnce) {
  const auto [ranks, odd] = GetParam();
  auto w = World::make(ranks, test_config());
  ASSERT_EQ(w->size(), ranks);
  w->run([odd](int, Communicator& c) { run_every_mismatched_pair(c, kPatience, odd); });
}

// At 12 ranks probes reach data partners only (r +- 2^k: 6 of 11 peers), and the odd rank is a
// partner of neither rank 0 nor the broadcasts' last rank.
INSTANTIATE_TEST_SUITE_P(Ranks, MismatchOverInproc,
                         ::testing::Values(std::pair{2, 0}, std::pair{3, 0}, std::pair{4, 0},
                                           std::pair{12, 5}),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "_odd" +
                                  std::to_string(info.param.second);
                         });

TEST(MismatchOverShm, EveryPairFailsOnEveryRankAtOnce) {
  constexpr int kRanks = 3;
  Config config = test_config({{"EAGERCOMM_TRANSPORT", "shm"}});
  auto comms = shm_world(kRanks, config, "mismatch" + std::to_string(getpid()));
  for (auto& c : comms) ASSERT_TRUE(c);
  run_ranks(comms, [](Communicator& c) { run_every_mismatched_pair(c, kPatience); });
  for (auto& c : comms) c->destroy();
}

// Rank 0 broadcasts from rank 2 while ranks 1 and 2 run recursive doubling: no message of one
// call reaches a rank running the other (rank 1 waits for rank 0's first step, rank 0 for rank
// 2's tree), so only the probes find it. EAGERCOMM_PROBE_AFTER sets when they go out; 0 sends
// none, and the calls then wait for their timeout.
TEST(MismatchProbes, ProbeAfterIsHonouredAndZeroNeverProbes) {
  const std::vector<CollectiveCall>& calls = mismatch_calls();
  const auto find = [&](std::string_view name) {
    return *std::find_if(calls.begin(), calls.end(), [&](const CollectiveCall& c) {
      return std::string_view(c.name).starts_with(name);
    });
  };
  const CollectiveCall bcast = find("broadcast(16 f32, root P-1)");
  const CollectiveCall rd = find("allreduce(2049 f32 sum)");
  for (const char* after : {"10ms", "0"}) {
    auto w = World::make(3, test_config({{"EAGERCOMM_PROBE_AFTER", after}}));
    std::vector<Status> st(3);
    w->run([&](int r, Communicator& c) {
      st[r] = make_call(c, r == 0 ? bcast : rd, std::chrono::seconds(3));
    });
    for (int r = 0; r < 3; ++r) {
      if (std::string_view(after) == "0") {
        EXPECT_NE(st[r].code(), StatusCode::kMismatch) << "rank " << r << ": " << st[r].to_string();
        EXPECT_FALSE(st[r].ok()) << "rank " << r;
      } else {
        EXPECT_EQ(st[r].code(), StatusCode::kMismatch) << "rank " << r << ": " << st[r].to_string();
      }
    }
  }
}

}  // namespace
}  // namespace eagercomm::test
