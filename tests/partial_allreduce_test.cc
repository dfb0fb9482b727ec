// Partial allreduce invariants (DESIGN.md section 5), each on the inproc transport with seeded
// random delays, for P in {1, 2, 3, 4, 5, 8, 13}, every mode, >= 200 rounds:
//   1. conservation: after flush, the results sum to the posts, exactly;
//   2. identical replicas: every rank receives the same result sequence, bit for bit;
//   3. staleness: with sync_every = N every post lands fewer than N rounds late;
//   4. solo: fast ranks do not wait for a straggler;
//   5. majority: the mean fresh fraction is at least 1/2; quorum(k): every round has >= k fresh;
//   6. adaptive: synchronous rounds when the ranks arrive together, and fast ranks that do not
//      wait for a straggler far beyond the patience.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "collectives/element_value.h"
#include "collectives/partial_meta.h"
#include "collectives/reduce_kernels.h"
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
                                PartialMode::quorum_of(std::max(1, P / 2)),
                                PartialMode::adaptive()};
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
      ASSERT_EQ(a.posts, b.posts) << what << " round " << i;
    }
  }
  // The metadata counts every post that added data (stats().posts) exactly once, in the poster's
  // slot, and a rank's slot has an age exactly when it has posts.
  for (int q = 0; q < P; ++q) {
    uint64_t counted = 0;
    for (const Received& x : rec[0].results) {
      counted += static_cast<uint64_t>(x.posts[q]);
      ASSERT_EQ(x.posts[q] > 0, x.age[q] >= 0) << what << " round " << x.round << " rank " << q;
      if (x.fresh[q]) {
        ASSERT_GT(x.posts[q], 0) << what << " round " << x.round;
      }
    }
    ASSERT_EQ(counted, rec[q].posts) << what << ": rank " << q << "'s posts (added, not dropped)";
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
          << mode.name() << " P=" << P << ": round " << x.round << " carries a post " << x.max_age
          << " rounds old";
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

// Rank 3 sleeps 200 ms before each of its `slow_iterations` posts; the others post `iterations`
// times without delay and must finish well within `limit_ms`.
void expect_fast_ranks_go_on(PartialMode mode, int iterations, int slow_iterations,
                             double limit_ms) {
  Scenario s;
  s.ranks = 4;
  s.mode = mode;
  s.iterations = iterations;
  s.slow_rank = 3;
  s.slow_delay_ms = 200;
  s.slow_iterations = slow_iterations;
  s.max_delay_us = 0;
  auto rec = run_scenario(s);
  if (::testing::Test::HasFailure()) return;
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(rec[r].loop_ms, limit_ms)
        << mode.name() << ": fast rank " << r << " took " << rec[r].loop_ms << " ms";
  }
  expect_conservation_and_replicas(s, rec, mode.name() + " straggler");
}

TEST(PartialAllreduce, SoloFastRanksDoNotWaitForAStraggler) {
  // 20 rounds at the straggler's pace would take 4000 ms; a fast rank must be far quicker.
  expect_fast_ranks_go_on(PartialMode::solo(), 20, 3, 1500.0);
}

TEST(PartialAllreduce, AdaptiveLeavesAFarStragglerBehind) {
  // Waiting for the straggler every round would take 40 x 200 ms; a quarter of a step after the
  // first arrival (the default patience) the others go on, and a step is short once they do.
  expect_fast_ranks_go_on(PartialMode::adaptive(), 40, 20, 4000.0);
}

TEST(PartialAllreduce, AdaptiveWaitsForRanksThatArriveTogether) {
  // Every rank sleeps the same 20 ms per step: arrivals spread by scheduling noise only, far
  // less than the patience (half a step, 10 ms), so the rounds are synchronous.
  Scenario s;
  s.ranks = 4;
  s.mode = PartialMode::adaptive();
  s.iterations = 30;
  s.delay_probability = 0;
  s.options.patience = 0.5;
  std::vector<RankRecord> rec;
  {
    Scenario paced = s;
    paced.slow_rank = -1;
    auto w = World::make(paced.ranks, test_config(paced.config));
    rec.resize(paced.ranks);
    w->run([&](int rank, Communicator& comm) {
      Scenario mine = paced;
      mine.slow_rank = rank;  // every rank "slow" by the same 20 ms: equal pace
      mine.slow_delay_ms = 20;
      rec[rank] = run_rank(rank, comm, mine);
    });
    for (int r = 0; r < s.ranks; ++r) ASSERT_TRUE(rec[r].error.ok()) << rec[r].error.to_string();
  }
  expect_conservation_and_replicas(s, rec, "adaptive balanced");
  const uint64_t checked = rounds_before_flush(rec);
  int all_fresh = 0, n = 0;
  for (const Received& x : rec[0].results) {
    if (x.round >= checked) break;
    all_fresh += x.fresh_count == s.ranks;
    ++n;
  }
  ASSERT_GT(n, 10);
  // Wide margin: a rank descheduled for more than 10 ms on this shared machine makes a round
  // partial now and then.
  EXPECT_GE(all_fresh, n * 2 / 3) << all_fresh << " of " << n << " rounds synchronous";
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

// The round metadata rides in the tail of the data allreduce (collectives/partial_meta.h): each
// rank writes only its own slots, the collective sums the tails, and every rank's values come
// back unchanged, in every data type, including values beyond one digit.
TEST(PartialMeta, EveryRanksValuesSurviveTheSumInEveryType) {
  for (DataType type : kAllDataTypes) {
    for (int P : {1, 3, 13, 64}) {
      const size_t n = detail::meta_elements(type, P);
      const size_t bytes = n * dtype_size(type);
      std::vector<uint8_t> sum(bytes, 0), one(bytes);
      std::vector<detail::RankMeta> want(P);
      std::mt19937_64 rng(static_cast<uint64_t>(P) * 7 + static_cast<uint64_t>(type));
      for (int r = 0; r < P; ++r) {
        detail::RankMeta& m = want[r];
        const int pick = static_cast<int>(rng() % 4);
        m.posts = pick == 0 ? 0 : pick == 1 ? 1 : pick == 2 ? 257 + r : 0x7fffffff - r;
        m.age = m.posts == 0 ? -1 : pick == 3 ? 1'000'000'007 : static_cast<int>(rng() % 70000);
        m.fresh = m.posts > 0 && (rng() & 1);
        std::fill(one.begin(), one.end(), uint8_t{0});
        detail::write_rank_meta(one.data(), type, P, r, m);
        reduce(type, ReduceOp::kSum, sum.data(), sum.data(), one.data(), n);
      }
      for (int r = 0; r < P; ++r) {
        const detail::RankMeta got = detail::read_rank_meta(sum.data(), type, P, r);
        ASSERT_EQ(got.posts, want[r].posts) << dtype_name(type) << " P=" << P << " rank " << r;
        ASSERT_EQ(got.age, want[r].age) << dtype_name(type) << " P=" << P << " rank " << r;
        ASSERT_EQ(got.fresh, want[r].fresh) << dtype_name(type) << " P=" << P << " rank " << r;
      }
    }
  }
  // Out of range: clamped, never wrapped to a small number.
  std::vector<float> tail(detail::meta_elements(DataType::kFloat32, 1), 0.0f);
  detail::write_rank_meta(tail.data(), DataType::kFloat32, 1, 0, {true, INT32_MAX, -5});
  const detail::RankMeta got = detail::read_rank_meta(tail.data(), DataType::kFloat32, 1, 0);
  EXPECT_EQ(got.age, INT32_MAX - 1);
  EXPECT_EQ(got.posts, 0);
}

// Every data type carries its metadata through real rounds: sync rounds report every rank fresh
// with one post, and the data is the plain sum.
TEST(PartialAllreduce, MetadataIsRightInEveryType) {
  for (DataType type : kAllDataTypes) {
    const int P = 3;
    const size_t count = 5;
    auto w = World::make(P, test_config({}));
    std::vector<std::string> errors(P);
    w->run([&](int rank, Communicator& comm) {
      auto made = PartialAllreduce::create(comm, count, type, PartialMode::sync());
      if (!made.ok()) {
        errors[rank] = made.status().to_string();
        return;
      }
      std::vector<uint8_t> g(count * dtype_size(type));
      for (int it = 0; it < 4; ++it) {
        for (size_t j = 0; j < count; ++j) store_element(type, g.data(), j, rank + it + 1);
        Status st = made.value()->post(g.data(), count, type);
        auto r = st.ok() ? made.value()->wait() : Result<RoundResult>(st);
        if (!r.ok()) {
          errors[rank] = r.status().to_string();
          return;
        }
        const RoundResult& res = r.value();
        std::string bad;
        for (int q = 0; q < P; ++q) {
          if (!res.fresh(q) || res.age(q) != 0 || res.posts(q) != 1)
            bad += " rank" + std::to_string(q);
        }
        for (size_t j = 0; j < count; ++j) {
          if (load_element(type, res.data(), j) != 3 * it + 6) bad += " element";
        }
        if (!bad.empty()) {
          errors[rank] = std::string(dtype_name(type)) + " round " + std::to_string(it) + ":" + bad;
          return;
        }
      }
      (void)made.value()->flush([](RoundResult&&) {});
    });
    for (int r = 0; r < P; ++r) EXPECT_EQ(errors[r], "") << dtype_name(type) << " rank " << r;
  }
}

}  // namespace
}  // namespace eagercomm::test
