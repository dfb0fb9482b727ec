// Every mismatched pair of collective calls (tests/mismatch_cases.h) fails with kMismatch on
// every rank at once, with ranks as threads over inproc and over shm: both map their memory,
// so small allreduces go through the boxes, where a peer running another collective once waited
// unseen until the timeout (issue 16).
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "runtime/store.h"
#include "tests/mismatch_cases.h"
#include "tests/world_harness.h"

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
  Config config = test_config({{"EAGERCOMM_TRANSPORT", "shm"}});
  constexpr int kRanks = 3;
  HashStore store;
  std::vector<std::unique_ptr<Communicator>> comms(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions opts;
      opts.config = &config;
      opts.scope = "mismatch" + std::to_string(getpid());
      auto c = Communicator::create(store, r, kRanks, opts);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      comms[r] = std::move(c).value();
      run_every_mismatched_pair(*comms[r], kPatience);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& c : comms) {
    if (c) c->destroy();
  }
}

}  // namespace
}  // namespace eagercomm::test
