// The schedule explorer (issue 21, item 5; sim/explorer.h): thousands of drawn schedules of
// partial allreduce rounds keep the partial collective's invariants; the explorer notices a
// broken delivery; a seed replays.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <string>

#include "runtime/build_config.h"
#include "sim/explorer.h"

namespace eagercomm::sim {
namespace {

// EAGERCOMM_EXPLORE_SEEDS overrides; sanitizer builds run a tenth (each world costs 10x there).
uint64_t seeds_to_run() {
  if (const char* env = std::getenv("EAGERCOMM_EXPLORE_SEEDS")) {
    return std::strtoull(env, nullptr, 10);
  }
  return std::string(EAGERCOMM_SANITIZER).empty() ? 2000 : 200;
}

TEST(Explorer, DrawnSchedulesKeepThePartialInvariants) {
  quiet_explorer_logs();
  const uint64_t n = seeds_to_run();
  const auto start = std::chrono::steady_clock::now();
  uint64_t died = 0, destroyed = 0, told = 0, stalled = 0, dropped = 0, bounded = 0, rounds = 0,
           failed = 0;
  std::set<std::string> modes;
  std::set<int> sizes;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    const ExploreCase c = draw_case(seed);
    const Result<ExploreOutcome> r = explore(c);
    if (!r.ok()) {
      // The message names the seed and the case: `eagercomm-sim --explore SEED` replays it.
      ADD_FAILURE() << r.status().message() << "\n  replay: eagercomm-sim --explore " << seed;
      if (++failed == 5) break;
      continue;
    }
    died += r.value().died;
    destroyed += r.value().died && c.destroy_instead;
    told += static_cast<uint64_t>(r.value().told_of_death);
    stalled += c.stall_rank >= 0;
    dropped += c.drop_late;
    bounded += c.sync_every > 0;
    rounds += r.value().rounds;
    modes.insert(c.mode.substr(0, c.mode.find(':')));
    sizes.insert(c.ranks);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "explored %llu seeds in %.1f s: %llu with a death, %llu stalls, %llu late=drop, "
      "%llu sync_every, %llu rounds\n",
      static_cast<unsigned long long>(n), wall, static_cast<unsigned long long>(died),
      static_cast<unsigned long long>(stalled), static_cast<unsigned long long>(dropped),
      static_cast<unsigned long long>(bounded), static_cast<unsigned long long>(rounds));
  // The draws covered what they are meant to (else the invariants were checked on less).
  if (n >= 200 && failed == 0) {
    EXPECT_EQ(modes.size(), 6u);     // solo, majority, quorum, sync, adaptive, deadline
    EXPECT_GE(sizes.size(), 20u);    // 2 .. 9, and a tenth of the worlds 10 .. 24
    EXPECT_GT(*sizes.rbegin(), 16);  // ranks with peers outside their partners
    EXPECT_GT(destroyed, n / 200);   // leaves by destroy(), not only deaths
    EXPECT_GT(died, n / 50);
    EXPECT_GT(told, died);  // deaths that survivors had to hear of, not only late ones
    EXPECT_GT(stalled, n / 10);
    EXPECT_GT(dropped, n / 10);
    EXPECT_GT(bounded, n / 10);
    EXPECT_GT(rounds, 2 * n);
  }
}

TEST(Explorer, ABrokenDeliveryIsNoticed) {
  // Drawn cases (no leave) with the network changing a byte in the middle of every payload from the
  // third on, outside the contract, and gradients large enough that the middle is gradient data (in
  // a small round it can be the round metadata's word that only adaptive rounds read): the explorer
  // reports the seed and a broken invariant (replicas, conservation or metadata) or a rank's
  // protocol error, never success.
  int noticed = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    ExploreCase c = draw_case(seed);
    c.death_rank = -1;
    c.drop_late = false;
    c.count = 2 * static_cast<size_t>(c.ranks) + 20000;
    c.corrupt_from = 3;
    const Result<ExploreOutcome> r = explore(c);
    ASSERT_FALSE(r.ok()) << "seed " << seed
                         << " with a corrupted delivery passed: " << c.describe();
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("seed " + std::to_string(seed) + ":"), std::string::npos)
        << r.status().message();
    ++noticed;
  }
  EXPECT_EQ(noticed, 10);
}

TEST(Explorer, ASeedReplaysBitForBit) {
  for (uint64_t seed : {5u, 6u, 9u, 15u}) {  // a stall; deaths, one while posting freely
    const ExploreCase c = draw_case(seed);
    EXPECT_EQ(c.describe(), draw_case(seed).describe());
    const Result<ExploreOutcome> a = explore(c);
    const Result<ExploreOutcome> b = explore(c);
    ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? b.status() : a.status()).message();
    EXPECT_EQ(a.value().virtual_ms, b.value().virtual_ms) << c.describe();
    EXPECT_EQ(a.value().timed_rounds, b.value().timed_rounds) << c.describe();
    EXPECT_EQ(a.value().died, b.value().died);
  }
}

TEST(Explorer, BadCasesAreRefused) {
  ExploreCase c;
  c.ranks = 1;
  EXPECT_EQ(explore(c).status().code(), StatusCode::kInvalidArgument);
  c.ranks = 4;
  c.count = 6;
  EXPECT_NE(explore(c).status().message().find("6 elements"), std::string::npos);
  c.count = 16;
  c.mode = "fastest";
  EXPECT_EQ(explore(c).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eagercomm::sim
