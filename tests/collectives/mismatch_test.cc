// Every mismatched pair of collective calls (tests/collectives/mismatch_cases.h) fails with
// kMismatch on every rank at once, with ranks as threads over inproc and over shm: both map their
// memory, so small allreduces go through the boxes, where a peer running another collective once
// waited unseen until the timeout (issue 16).
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "tests/collectives/mismatch_cases.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

// Generous for a loaded 2-core machine and the sanitizers; a call that waits for its timeout
// (four times this) fails.
constexpr std::chrono::seconds kPatience(15);

class MismatchOverInproc : public ::testing::TestWithParam<int> {};

TEST_P(MismatchOverInproc, EveryPairFailsOnEveryRankAtOnce) {
  auto w = World::make(GetParam(), test_config());
  ASSERT_EQ(w->size(), GetParam());
  w->run([](int, Communicator& c) { run_every_mismatched_pair(c, kPatience); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, MismatchOverInproc, ::testing::Values(2, 3, 4));

TEST(MismatchOverShm, EveryPairFailsOnEveryRankAtOnce) {
  constexpr int kRanks = 3;
  Config config = test_config({{"EAGERCOMM_TRANSPORT", "shm"}});
  auto comms = shm_world(kRanks, config, "mismatch" + std::to_string(getpid()));
  for (auto& c : comms) ASSERT_TRUE(c);
  run_ranks(comms, [](Communicator& c) { run_every_mismatched_pair(c, kPatience); });
  for (auto& c : comms) c->destroy();
}

}  // namespace
}  // namespace eagercomm::test
