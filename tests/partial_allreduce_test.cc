// Partial allreduce invariants (DESIGN.md section 5), each on the inproc transport with seeded
// random delays, for P in {1, 2, 3, 4, 5, 8, 13}, every mode, >= 200 rounds:
//   1. conservation: after flush, the results sum to the posts, exactly;
//   2. identical replicas: every rank receives the same result sequence, bit for bit;
//   3. staleness: with sync_every = N every post lands fewer than N rounds late;
//   4. solo: fast ranks do not wait for a straggler;
//   5. majority: the mean fresh fraction is at least 1/2; quorum(k): every round has >= k fresh.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/partial_harness.h"

namespace eagercomm::test {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kRounds = 60;  // sanitizers: keep the run short
#else
constexpr int kRounds = 200;
#endif

struct ModeCase {
  const char* name;
  PartialMode mode;
};

std::vector<PartialMode> modes_for(int P) {
  std::vector<PartialMode> m = {PartialMode::sync(), PartialMode::solo(), PartialMode::majority(),
                                PartialMode::quorum_of(std::max(1, P / 2))};
  return m;
}

// Rounds whose activation no flush could have influenced: every rank had entered them before
// the first rank began flushing.
uint64_t rounds_before_flush(const std::vector<RankRecord>& rec) {
  uint64_t m = UINT64_MAX;
  for (const auto& r : rec) m = std::min(m, r.activated_at_flush);
  return m;
}

void expect_conservation_and_replicas(const Scenario& s, const std::vector<RankRecord>& rec,
                                      const std::string& what) {
  const int P = s.ranks;
  // Every rank saw rounds 0 .. F in order, F the same flush round everywhere.
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(rec[r].results.empty()) << what << " rank " << r;
    ASSERT_EQ(rec[r].flush_round, rec[0].flush_round) << what;
    ASSERT_EQ(rec[r].results.size(), rec[0].results.size()) << what << " rank " << r;
    for (size_t i = 0; i < rec[r].results.size(); ++i) {
      ASSERT_EQ(rec[r].results[i].round, i) << what << " rank " << r << " out of order";
    }
  }
  // Identical replicas: data bits and metadata.
  for (int r = 1; r < P; ++r) {
    for (size_t i = 0; i < rec[0].results.size(); ++i) {
      const Received& a = rec[0].results[i];
      const Received& b = rec[r].results[i];
      ASSERT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)))
          << what << ": round " << i << " differs between rank 0 and rank " << r;
      ASSERT_EQ(a.fresh, b.fresh) << what << " round " << i;
      ASSERT_EQ(a.age, b.age) << what << " round " << i;
    }
  }
  // Conservation: the sum over results equals the sum over everybody's posts (minus drops).
  std::vector<double> results(s.count, 0.0), posted(s.count, 0.0);
  for (const Received& x : rec[0].results) {
    for (size_t j = 0; j < s.count; ++j) results[j] += x.data[j];
  }
  uint64_t dropped = 0;
  for (const auto& r : rec) {
    for (size_t j = 0; j < s.count; ++j) posted[j] += r.posted[j];
    dropped += r.dropped;
  }
  for (size_t j = 0; j < s.count; ++j) {
    // Dropped posts are all-ones gradients in drop scenarios, so each one is 1 per element.
    ASSERT_EQ(results[j] + static_cast<double>(dropped), posted[j])
        << what << ": element " << j << " (dropped " << dropped << ")";
  }
}

class PartialInvariants : public ::testing::TestWithParam<int> {};

TEST_P(PartialInvariants, ConservationAndIdenticalReplicasInEveryMode) {
  const int P = GetParam();
  for (const PartialMode& mode : modes_for(P)) {
    Scenario s;
    s.ranks = P;
    s.mode = mode;
    s.iterations = kRounds;
    s.seed = 17 + P;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    expect_conservation_and_replicas(s, rec, "P=" + std::to_string(P) + " " + mode.name());
    if (HasFailure()) return;
  }
}

TEST_P(PartialInvariants, DropPolicyAccountsForEveryDiscardedPost) {
  const int P = GetParam();
  for (const PartialMode& mode : {PartialMode::solo(), PartialMode::majority()}) {
    Scenario s;
    s.ranks = P;
    s.mode = mode;
    s.options.late = LatePolicy::kDrop;
    s.iterations = kRounds;
    s.ones = true;
    s.seed = 5 + P;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    expect_conservation_and_replicas(s, rec, "drop P=" + std::to_string(P) + " " + mode.name());
    uint64_t total = 0;
    for (const auto& r : rec) total += r.posts + r.dropped;
    EXPECT_EQ(total, static_cast<uint64_t>(P) * kRounds);
  }
}

TEST_P(PartialInvariants, SyncEveryBoundsStaleness) {
  const int P = GetParam();
  const uint32_t N = 4;
  for (const PartialMode& mode : {PartialMode::solo(), PartialMode::majority()}) {
    Scenario s;
    s.ranks = P;
    s.mode = mode;
    s.options.sync_every = N;
    s.iterations = kRounds;
    s.seed = 99 + P;
    s.max_delay_us = 1500;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    expect_conservation_and_replicas(s, rec, "sync_every P=" + std::to_string(P));
    const uint64_t checked = rounds_before_flush(rec);
    for (const Received& x : rec[0].results) {
      if (x.round >= checked) break;
      ASSERT_LT(x.max_age, static_cast<int>(N))
          << mode.name() << " P=" << P << ": round " << x.round << " carries a post "
          << x.max_age << " rounds old";
      if ((x.round + 1) % N == 0) {
        ASSERT_EQ(x.fresh_count, P) << "synchronous round " << x.round << " is not all fresh";
      }
    }
  }
}

TEST_P(PartialInvariants, QuorumGuaranteesKFreshAndMajorityHalfOnAverage) {
  const int P = GetParam();
  {
    Scenario s;
    s.ranks = P;
    s.mode = PartialMode::quorum_of(std::max(1, (P + 1) / 2));
    s.iterations = kRounds;
    s.seed = 7 + P;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    const uint64_t checked = rounds_before_flush(rec);
    for (const Received& x : rec[0].results) {
      if (x.round >= checked) break;
      ASSERT_GE(x.fresh_count, s.mode.quorum) << s.mode.name() << " round " << x.round;
    }
  }
  {
    Scenario s;
    s.ranks = P;
    s.mode = PartialMode::majority();
    s.iterations = kRounds;
    s.seed = 11 + P;
    s.delay_probability = 1.0;  // random arrival order every round
    s.max_delay_us = 1000;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    const uint64_t checked = rounds_before_flush(rec);
    double sum = 0;
    int n = 0;
    for (const Received& x : rec[0].results) {
      if (x.round >= checked) break;
      sum += static_cast<double>(x.fresh_count) / P;
      ++n;
    }
    ASSERT_GT(n, 20);
    EXPECT_GE(sum / n, 0.5) << "majority: mean fresh fraction over " << n << " rounds";
  }
}

INSTANTIATE_TEST_SUITE_P(P, PartialInvariants, ::testing::Values(1, 2, 3, 4, 5, 8, 13),
                         [](const auto& info) { return "P" + std::to_string(info.param); });

TEST(PartialAllreduce, SoloFastRanksDoNotWaitForAStraggler) {
  Scenario s;
  s.ranks = 4;
  s.mode = PartialMode::solo();
  s.iterations = 20;
  s.slow_rank = 3;
  s.slow_delay_ms = 200;
  s.slow_iterations = 3;
  s.max_delay_us = 0;
  auto rec = run_scenario(s);
  if (HasFailure()) return;
  for (int r = 0; r < 3; ++r) {
    // 20 rounds at the straggler's pace would take 4000 ms; a fast rank must be far quicker.
    EXPECT_LT(rec[r].loop_ms, 1500.0) << "fast rank " << r << " took " << rec[r].loop_ms << " ms";
  }
  expect_conservation_and_replicas(s, rec, "solo straggler");
}

TEST(PartialAllreduce, SyncModeIsAPlainAllreduceOfFreshGradients) {
  Scenario s;
  s.ranks = 5;
  s.mode = PartialMode::sync();
  s.iterations = 50;
  auto rec = run_scenario(s);
  if (HasFailure()) return;
  for (const Received& x : rec[0].results) {
    if (x.round == rec[0].flush_round) break;
    ASSERT_EQ(x.fresh_count, 5) << "round " << x.round;
    ASSERT_EQ(x.max_age, 0);
    for (size_t j = 0; j < s.count; ++j) {
      float expect = 0;
      for (int r = 0; r < 5; ++r) expect += gradient_value(r, static_cast<int>(x.round), j);
      ASSERT_EQ(x.data[j], expect) << "round " << x.round;
    }
  }
}

}  // namespace
}  // namespace eagercomm::test
