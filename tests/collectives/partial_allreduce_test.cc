// Partial allreduce invariants (docs/ARCHITECTURE.md, "Partial allreduce"), each on the inproc
// transport with seeded random delays, for P in {1, 2, 3, 4, 5, 8, 13}, every mode, >= 200 rounds:
//   1. conservation: after flush, the results sum to the posts, exactly;
//   2. identical replicas: every rank receives the same result sequence, bit for bit;
//   3. staleness: with sync_every = N every post lands fewer than N rounds late;
//   4. solo: fast ranks do not wait for a straggler;
//   5. majority: the mean fresh fraction is at least 1/2; quorum(k): every round has >= k fresh;
//   6. adaptive: synchronous rounds when the ranks arrive together or one rank is slow at every
//      step, solo rounds under a straggler that moves between ranks (collectives/
//      adaptive_regime.h has the arithmetic's own tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/element_value.h"
#include "collectives/kernels/reduce_kernels.h"
#include "collectives/partial/adaptive_regime.h"
#include "collectives/partial/deadline_tuner.h"
#include "collectives/partial/flood_order.h"
#include "collectives/partial/partial_meta.h"
#include "tests/collectives/partial_scenario.h"

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
  std::vector<PartialMode> m = {
      PartialMode::sync(),         PartialMode::solo(),
      PartialMode::majority(),     PartialMode::quorum_of(std::max(1, P / 2)),
      PartialMode::adaptive(),     PartialMode::deadline_of(std::chrono::microseconds(300)),
      PartialMode::deadline_auto()};
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

// Every invariant over both round paths: rounds through the object's boxes (the default for
// these 37-element gradients on inproc) and rounds as messages (EAGERCOMM_SMALL_MAX_BYTES=0).
class PartialInvariants : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int ranks() const { return std::get<0>(GetParam()); }
  bool boxes() const { return std::get<1>(GetParam()); }
  Scenario scenario() const {
    Scenario s;
    s.ranks = ranks();
    if (!boxes()) s.config = {{"EAGERCOMM_SMALL_MAX_BYTES", "0"}};
    return s;
  }
  // run_scenario(), checking that the rounds took the path under test (one rank has no peers).
  std::vector<RankRecord> run(const Scenario& s) {
    std::vector<RankRecord> rec = run_scenario(s);
    for (int r = 0; r < s.ranks && !HasFailure(); ++r) {
      EXPECT_EQ(rec[r].in_boxes, boxes() && s.ranks > 1) << "rank " << r;
    }
    return rec;
  }
};

TEST_P(PartialInvariants, ConservationAndIdenticalReplicasInEveryMode) {
  const int P = ranks();
  for (const PartialMode& mode : modes_for(P)) {
    Scenario s = scenario();
    s.mode = mode;
    s.iterations = kRounds;
    s.seed = 17 + P;
    auto rec = run(s);
    if (HasFailure()) return;
    expect_conservation_and_replicas(s, rec, "P=" + std::to_string(P) + " " + mode.name());
    if (HasFailure()) return;
  }
}

TEST_P(PartialInvariants, DropPolicyAccountsForEveryDiscardedPost) {
  const int P = ranks();
  for (const PartialMode& mode : {PartialMode::solo(), PartialMode::majority()}) {
    Scenario s = scenario();
    s.mode = mode;
    s.options.late = LatePolicy::kDrop;
    s.iterations = kRounds;
    s.ones = true;
    s.seed = 5 + P;
    auto rec = run(s);
    if (HasFailure()) return;
    expect_conservation_and_replicas(s, rec, "drop P=" + std::to_string(P) + " " + mode.name());
    uint64_t total = 0;
    for (const auto& r : rec) total += r.posts + r.dropped;
    EXPECT_EQ(total, static_cast<uint64_t>(P) * kRounds);
  }
}

TEST_P(PartialInvariants, SyncEveryBoundsStaleness) {
  const int P = ranks();
  const uint32_t N = 4;
  for (const PartialMode& mode : {PartialMode::solo(), PartialMode::majority()}) {
    Scenario s = scenario();
    s.mode = mode;
    s.options.sync_every = N;
    s.iterations = kRounds;
    s.seed = 99 + P;
    s.max_delay_us = 1500;
    auto rec = run(s);
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
  const int P = ranks();
  {
    Scenario s = scenario();
    s.mode = PartialMode::quorum_of(std::max(1, (P + 1) / 2));
    s.iterations = kRounds;
    s.seed = 7 + P;
    auto rec = run(s);
    if (HasFailure()) return;
    const uint64_t checked = rounds_before_flush(rec);
    for (const Received& x : rec[0].results) {
      if (x.round >= checked) break;
      ASSERT_GE(x.fresh_count, s.mode.quorum) << s.mode.name() << " round " << x.round;
    }
  }
  {
    Scenario s = scenario();
    s.mode = PartialMode::majority();
    s.iterations = kRounds;
    s.seed = 11 + P;
    s.delay_probability = 1.0;  // random arrival order every round
    s.max_delay_us = 1000;
    auto rec = run(s);
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

// Boxes at every size; messages (the path before boxes, and the one every transport without
// mapped allocations takes, over processes in mp_collectives_*) at a power of two, an odd size
// and the largest, to keep make check within its time.
INSTANTIATE_TEST_SUITE_P(P, PartialInvariants,
                         ::testing::Values(std::tuple(1, true), std::tuple(2, true),
                                           std::tuple(3, true), std::tuple(4, true),
                                           std::tuple(5, true), std::tuple(8, true),
                                           std::tuple(13, true), std::tuple(2, false),
                                           std::tuple(5, false), std::tuple(13, false)),
                         [](const auto& info) {
                           return "P" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_boxes" : "_messages");
                         });

// Rounds [from, to) of rank 0's results before the flush round: how many had every rank fresh.
std::pair<int, int> all_fresh_rounds(const std::vector<RankRecord>& rec, int ranks, uint64_t from,
                                     uint64_t to) {
  const uint64_t end = std::min(to, rounds_before_flush(rec));
  int all_fresh = 0, n = 0;
  for (const Received& x : rec[0].results) {
    if (x.round < from || x.round >= end) continue;
    all_fresh += x.fresh_count == ranks;
    ++n;
  }
  return {all_fresh, n};
}

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

TEST(PartialAllreduce, DeadlineFastRanksWaitAtMostTForAStraggler) {
  // Ten rounds wait 20 ms each for the straggler's 200 ms sleeps (synchronous rounds: 2000 ms in
  // all, measured).
  expect_fast_ranks_go_on(PartialMode::deadline_of(std::chrono::milliseconds(20)), 20, 10, 1500.0);
}

// deadline(T): a round every rank posts to within T waits for all of them (it is synchronous);
// a round a rank misses is set off T after the coordinator's first arrival, not sooner.
TEST(PartialAllreduce, DeadlineWaitsForEveryRankWithinTAndNoLonger) {
  {
    // Random delays up to 1 ms, T = 2 s: every round before the flush has every rank fresh.
    Scenario s;
    s.ranks = 4;
    s.mode = PartialMode::deadline_of(std::chrono::seconds(2));
    s.iterations = 60;
    s.delay_probability = 1.0;
    s.max_delay_us = 1000;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    expect_conservation_and_replicas(s, rec, "deadline(2s)");
    const auto [all_fresh, n] = all_fresh_rounds(rec, s.ranks, 0, UINT64_MAX);
    ASSERT_GT(n, 30);
    EXPECT_EQ(all_fresh, n) << all_fresh << " of " << n << " rounds had every rank";
  }
  // Rank 1 posts 1.5 s late into round 0, whose coordinator is rank 0; T = 100 ms.
  constexpr auto kT = std::chrono::milliseconds(100);
  auto w = World::make(2, test_config());
  std::vector<double> took_ms(2, 0);
  std::vector<int> fresh(2, -1);
  w->run([&](int rank, Communicator& comm) {
    auto pa = PartialAllreduce::create(comm, 8, DataType::kFloat32, PartialMode::deadline_of(kT));
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    std::vector<float> g(8, 1.0f);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(pa.value()->post(g.data(), 8, DataType::kFloat32).ok());
    auto r = pa.value()->wait();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    took_ms[rank] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fresh[rank] = r.value().fresh_count();
    EXPECT_EQ(r.value().round(), 0u);
    ASSERT_TRUE(pa.value()->flush([](const RoundResult&) { return Status::Ok(); }).ok());
  });
  EXPECT_EQ(fresh[0], 1) << "round 0 went without the late rank";
  EXPECT_EQ(fresh[1], 1);
  EXPECT_GE(took_ms[0], 95.0) << "set off before its deadline";
  EXPECT_LT(took_ms[0], 1400.0) << "waited for the late rank instead of T";
}

// Straggler attribution (issue 22, item 2): rank 2 sleeps 15 ms before each of its 30 posts; the
// others post every 2 ms, taking a result in between, for as long as rank 2 runs (so no rank
// flushes while it still posts). deadline(5 ms) rounds wait for the fast ranks (they arrive
// together) and go without rank 2. Every rank's lateness() says the same; rank 2's posts landed
// late, the others' fresh; the periodic report (EAGERCOMM_STRAGGLER_REPORT=10, rank 0) names
// rank 2 and nobody else.
TEST(PartialAllreduce, LatenessNamesAPersistentlySlowRank) {
  constexpr int kRanks = 4, kSlowSteps = 30, kSlow = 2;
  auto w = World::make(kRanks, test_config({{"EAGERCOMM_STRAGGLER_REPORT", "10"}}));
  std::vector<std::vector<RankLateness>> seen(kRanks);
  std::vector<uint64_t> posted(kRanks, 0);
  std::atomic<bool> slow_done{false};
  ::testing::internal::CaptureStderr();
  w->run([&](int rank, Communicator& comm) {
    auto pa = PartialAllreduce::create(comm, 16, DataType::kFloat32,
                                       PartialMode::deadline_of(std::chrono::milliseconds(5)));
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    std::vector<float> g(16, 1.0f);
    for (int step = 0; rank == kSlow ? step < kSlowSteps : !slow_done.load(); ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rank == kSlow ? 15 : 2));
      ASSERT_TRUE(pa.value()->post(g.data(), 16, DataType::kFloat32).ok());
      ++posted[rank];
      bool took = false;
      for (;;) {
        auto r = pa.value()->poll();
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        if (!r.value()) break;
        took = true;
      }
      if (!took && rank != kSlow) {
        ASSERT_TRUE(pa.value()->wait().ok());
      }
    }
    if (rank == kSlow) slow_done.store(true);
    Result<uint64_t> flushed = pa.value()->flush([](RoundResult&&) {});
    ASSERT_TRUE(flushed.ok()) << flushed.status().to_string();
    seen[rank] = pa.value()->lateness();
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  if (::testing::Test::HasFailure()) {
    std::fprintf(stderr, "%s", log.c_str());
    return;
  }
  ASSERT_EQ(seen[0].size(), static_cast<size_t>(kRanks));
  for (int r = 1; r < kRanks; ++r) {
    for (int q = 0; q < kRanks; ++q) {
      EXPECT_EQ(seen[r][q].fresh, seen[0][q].fresh) << "rank " << r << " on rank " << q;
      EXPECT_EQ(seen[r][q].late_rounds, seen[0][q].late_rounds) << "rank " << r << " on " << q;
    }
  }
  for (int q = 0; q < kRanks; ++q) {
    const RankLateness& l = seen[0][q];
    EXPECT_EQ(l.posts, posted[q]) << "rank " << q;
    if (q == kSlow) {
      EXPECT_GE(l.late_fraction(), 0.5) << "the slow rank: " << l.fresh << " of 30 fresh";
      EXPECT_GT(l.late_rounds, 0u);
      EXPECT_GT(l.late_seconds, 0.0);
    } else {
      // Wide: a fast rank descheduled for over 5 ms misses its round too.
      EXPECT_LE(l.late_fraction(), 0.3)
          << "fast rank " << q << ": " << l.fresh << " of " << l.posts << " fresh";
    }
  }
  // "rounds 0-9: persistent stragglers: rank 2 late with 4 of 4 posts (by 2.0 rounds, ~14.4 ms,
  // on average)", every 10 rounds.
  EXPECT_NE(log.find("persistent stragglers: rank 2 late with"), std::string::npos) << log;
  for (int q : {0, 1, 3}) {
    EXPECT_EQ(log.find("rank " + std::to_string(q) + " late with"), std::string::npos) << log;
  }
}

TEST(DeadlineTuner, TIsTwiceTheMedianSpreadOverSixteenRounds) {
  using detail::DeadlineTuner;
  // The coordinator's measure: the arrival of all but a tenth of the ranks (at least one left out,
  // at least two counted) after the first (8 ranks: the 7th), in any order; a round set off
  // before that many arrived reports how long it waited.
  EXPECT_EQ(DeadlineTuner::covered(2), 2);
  EXPECT_EQ(DeadlineTuner::covered(4), 3);
  EXPECT_EQ(DeadlineTuner::covered(64), 58);
  EXPECT_EQ(DeadlineTuner::covered(4096), 3687);
  std::vector<int64_t> arrivals = {9'000'000, 1'000'000, 1'030'000, 1'010'000,
                                   1'020'000, 1'040'000, 1'050'000, 1'060'000};
  EXPECT_EQ(DeadlineTuner::spread_us(arrivals, 8, 9'500'000), 60u);
  std::vector<int64_t> three = {2'000'000, 2'100'000, 2'200'000};
  EXPECT_EQ(DeadlineTuner::spread_us(three, 8, 2'700'000), 700u) << "cut off: a lower bound";
  std::vector<int64_t> none;
  EXPECT_EQ(DeadlineTuner::spread_us(none, 8, 5), 0u);

  DeadlineTuner tuner;
  for (int k = 0; k < 15; ++k) {
    tuner.observe(k % 3 == 0 ? 5000 : 30);  // every third round slow: above the median
    EXPECT_FALSE(tuner.deadline()) << "no T before 16 rounds were measured (round " << k << ")";
  }
  tuner.observe(30);
  ASSERT_TRUE(tuner.deadline());
  EXPECT_EQ(tuner.deadline()->count(), 60);
  // Rounds cut off at T report at least T: once they are the median, T doubles.
  for (int k = 0; k < 16; ++k) tuner.observe(60);
  EXPECT_EQ(tuner.deadline()->count(), 120);
  // Everybody at once: the floor.
  for (int k = 0; k < 16; ++k) tuner.observe(0);
  EXPECT_EQ(*tuner.deadline(), DeadlineTuner::kMinDeadline);
}

// Rounds through boxes in every mode, while no rank flushes (the first half of each rank's
// loop): no mailbox message at all. A
// contribution in a box activates its round (solo; majority from the initiator; quorum and
// synchronous rounds from the coordinator, which counts the tentative stores of the ranks that
// entered early as their arrivals), so neither activations nor arrivals nor data travel as
// messages. The same rounds as messages send some (the control: the counter counts).
TEST(PartialAllreduce, RoundsThroughBoxesSendNoMessageInAnyMode) {
  for (bool boxes : {true, false}) {
    for (const PartialMode& mode :
         {PartialMode::solo(), PartialMode::majority(), PartialMode::quorum_of(2),
          PartialMode::sync(), PartialMode::adaptive()}) {
      Scenario s;
      s.ranks = 4;
      s.mode = mode;
      s.iterations = 60;
      s.seed = 31;
      s.config = {{"EAGERCOMM_HEARTBEAT", "0"}};
      if (!boxes) s.config.emplace_back("EAGERCOMM_SMALL_MAX_BYTES", "0");
      auto rec = run_scenario(s);
      if (HasFailure()) return;
      const std::string what = mode.name() + (boxes ? " through boxes" : " as messages");
      expect_conservation_and_replicas(s, rec, what);
      uint64_t sent = 0;
      for (const RankRecord& r : rec) {
        ASSERT_EQ(r.in_boxes, boxes) << what;
        sent += r.loop_messages;
      }
      if (boxes) {
        EXPECT_EQ(sent, 0u) << what << ": messages sent while the ranks posted";
      } else if (mode.kind != PartialKind::kSolo) {
        EXPECT_GT(sent, 0u) << what << ": the control sent nothing";
      }
    }
  }
}

// Rounds through boxes: a contribution stored in a peer's box must wake that peer's engine,
// asleep in the transport's wait() while its application does something else (here: rank 3
// sleeps 1.5 s before its one post). The other ranks pause up to 10 ms (5 ms on average) before
// each of their 40 posts, longer than an engine spins before it sleeps (1 ms), so rank 3's engine
// is asleep when each round begins: with the wake-up the loop takes about 0.2 s; without it rank
// 3's progress thread looks only every 100 ms (the engine's longest sleep), about one round per
// look: seconds (measured: 3.9 s). The result queue is deeper than the rounds can be (each
// post may start its own round: up to 120): rank 3 takes no result while it sleeps, and a full
// queue would hold every rank back, whichever path the rounds take.
TEST(PartialAllreduce, RoundsThroughBoxesWakeARankWhoseApplicationSleeps) {
  Scenario s;
  s.ranks = 4;
  s.mode = PartialMode::solo();
  s.options.result_depth = 128;
  s.iterations = 40;
  s.slow_rank = 3;
  s.slow_delay_ms = 1500;
  s.slow_iterations = 1;
  s.delay_probability = 1.0;
  s.max_delay_us = 10000;
  auto rec = run_scenario(s);
  if (HasFailure()) return;
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(rec[r].in_boxes) << "rank " << r;
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(rec[r].loop_ms, 1200.0) << "fast rank " << r << " took " << rec[r].loop_ms << " ms";
  }
  expect_conservation_and_replicas(s, rec, "sleeping rank");
}

// The activation flood's order (flood_order.h) in a LogP model: every rank forwards on every
// stride once it has heard; a send costs the sender o, the hop L and the receiver o. From rank 0
// (every rank's view is the same, relative), every rank hears within ceil(log4 P) hops of L + 4o
// (two sends queued ahead at most), which stays inside issue 21's (log2 P + 1) L whenever
// L >= 5o (the HDR preset's ratio). A binomial order of 2^k strides takes log2 P hops of L + 2o.
double flood_last_hears(int P, double L, double o) {
  detail::FloodOrder order(P);
  std::vector<double> heard(static_cast<size_t>(P), -1.0);
  using Arrival = std::pair<double, int>;
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals;
  arrivals.push({0.0, 0});
  detail::FloodOrder::Strides strides;
  const int every = order.strides(0, &strides);
  double last = 0;
  while (!arrivals.empty()) {
    const auto [t, rank] = arrivals.top();
    arrivals.pop();
    if (heard[static_cast<size_t>(rank)] >= 0) continue;
    heard[static_cast<size_t>(rank)] = t;
    last = std::max(last, t);
    const int n = order.strides(rank, &strides);
    EXPECT_EQ(n, every);  // every stride, once
    std::vector<int> sorted(strides.begin(), strides.begin() + n);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "P=" << P;
    for (int k = 0; k < n; ++k) {
      EXPECT_GT(strides[k], 0);
      EXPECT_LT(strides[k], P);
      arrivals.push({t + k * o + o + L + o, (rank + strides[k]) % P});
    }
  }
  for (int r = 0; r < P; ++r) {
    EXPECT_GE(heard[static_cast<size_t>(r)], 0.0) << "P=" << P << " rank " << r;
  }
  return last;
}

TEST(FloodOrder, EveryRankHearsWithinLog4PHopsInsideTheIssuesBound) {
  for (int P = 1; P <= 600; ++P) {
    const detail::FloodOrder order(P);
    int levels = 0;
    for (long long n = 1; n < P; n *= 4) ++levels;
    ASSERT_EQ(order.levels(), levels) << P;
    detail::FloodOrder::Strides strides;
    ASSERT_LE(order.strides(0, &strides), 3 * levels) << P;
    for (const double o : {0.2, 0.5}) {
      const double last = flood_last_hears(P, 1.0, o);
      EXPECT_LE(last, levels * (1.0 + 4 * o) + 1e-9) << "P=" << P << " o=" << o;
      if (o == 0.2) {
        EXPECT_LE(last, std::ceil(std::log2(static_cast<double>(P))) + 1.0 + 1e-9) << P;
      }
    }
  }
  for (const int P : {1000, 1024, 4096, 5000}) {
    EXPECT_LE(flood_last_hears(P, 1.0, 0.2), std::log2(static_cast<double>(P)) + 1.0) << P;
  }
  // The root sends every level, highest first, digits 1, 2, -1 (at P = 64, -16 is 48); the
  // rank at offset 4 (level 1) sends its children 5, 6, 3 first, then the rest. At offset 40 of
  // 42 no stride leads to a child: 41 and 39 are -1 and -3, fewer digits than 40 + 1 and 40 - 1.
  const detail::FloodOrder order(64);
  detail::FloodOrder::Strides s;
  const auto order_at = [&](const detail::FloodOrder& o, int offset) {
    const int n = o.strides(offset, &s);
    return std::vector<int>(s.begin(), s.begin() + n);
  };
  EXPECT_EQ(order_at(order, 0), (std::vector<int>{16, 32, 48, 4, 8, 60, 1, 2, 63}));
  EXPECT_EQ(order_at(order, 4), (std::vector<int>{1, 2, 63, 16, 32, 48, 4, 8, 60}));
  EXPECT_EQ(order_at(order, 5), (std::vector<int>{16, 32, 48, 4, 8, 60, 1, 2, 63}));
  EXPECT_EQ(order_at(detail::FloodOrder(42), 40),
            (std::vector<int>{16, 32, 26, 4, 8, 38, 1, 2, 41}));
  // Every stride is a data partner (r +- 2^k): activations connect no other peer (issue 21).
  for (const int P : {2, 3, 5, 12, 42, 64, 100, 1000, 1024, 4096}) {
    const detail::FloodOrder o(P);
    const std::vector<int> partners = detail::data_partners(0, P);
    for (int stride : order_at(o, 0)) {
      EXPECT_TRUE(std::binary_search(partners.begin(), partners.end(), stride))
          << "P=" << P << ": stride " << stride << " is not a data partner of rank 0";
    }
  }
}

// The regime's arithmetic on made-up metadata: 4 ranks, windows of 8 rounds, solo from a
// predicted 1.5x. compute(round, rank) is the rank's compute before its post in that round.
std::vector<bool> regime_decisions(const std::function<uint32_t(uint64_t, int)>& compute,
                                   uint64_t rounds, double* predicted = nullptr) {
  detail::AdaptiveRegime regime(4, 8, 1.5);
  std::vector<bool> solo;
  std::vector<detail::RankMeta> metas(4);
  for (uint64_t r = 0; r < rounds; ++r) {
    solo.push_back(regime.solo(r));  // asked before the round, as the engine does
    for (int p = 0; p < 4; ++p) {
      metas[p] = {};
      metas[p].posts = 1;
      metas[p].age = 0;
      metas[p].fresh = true;
      metas[p].compute_us = compute(r, p);
      metas[p].measured = metas[p].compute_us > 0 ? 1 : 0;
    }
    regime.observe(r, metas);
  }
  if (predicted) *predicted = regime.predicted_speedup();
  return solo;
}

TEST(AdaptiveRegime, AMovingStragglerMakesRoundsSoloFromTheThirdWindow) {
  // Rank r % 4 computes 40 ms in round r, the others 10 ms: a synchronous step lasts 40 ms,
  // every rank's mean is 17.5 ms: 2.3x.
  double predicted = 0;
  const auto solo = regime_decisions(
      [](uint64_t r, int p) { return r % 4 == static_cast<uint64_t>(p) ? 40'000u : 10'000u; }, 64,
      &predicted);
  EXPECT_NEAR(predicted, 40.0 / 17.5, 1e-9);
  for (uint64_t r = 0; r < 16; ++r) EXPECT_FALSE(solo[r]) << "round " << r;
  for (uint64_t r = 16; r < 64; ++r) EXPECT_TRUE(solo[r]) << "round " << r;
}

TEST(AdaptiveRegime, EqualPaceAndAPersistentStragglerStaySynchronous) {
  // Scheduling noise only (10-12 ms), and rank 3 slow at every step (30 ms): the synchronous
  // step is within 1.5x of the slowest rank's mean in both.
  for (const auto& compute : std::vector<std::function<uint32_t(uint64_t, int)>>{
           [](uint64_t r, int p) {
             return 10'000u + static_cast<uint32_t>((r * 7 + p * 3) % 3) * 1000u;
           },
           [](uint64_t, int p) { return p == 3 ? 30'000u : 10'000u; }}) {
    double predicted = 0;
    const auto solo = regime_decisions(compute, 64, &predicted);
    EXPECT_LT(predicted, 1.5);
    for (uint64_t r = 0; r < 64; ++r) EXPECT_FALSE(solo[r]) << "round " << r;
  }
}

TEST(AdaptiveRegime, FollowsAStragglerThatComesAndGoes) {
  // The moving straggler for rounds 0-31, then equal pace: solo from window 2 (decided from
  // window 0), synchronous again from the first window decided from two of equal pace.
  const auto solo = regime_decisions(
      [](uint64_t r, int p) {
        return r < 32 && r % 4 == static_cast<uint64_t>(p) ? 40'000u : 10'000u;
      },
      80);
  // Window 6 (rounds 48-55) is decided from windows 3 and 4, half straggler, half equal pace
  // (25 ms against 13.75: 1.8x): still solo. Window 7 is decided from windows 4 and 5, equal
  // pace: synchronous.
  for (uint64_t r = 16; r < 56; ++r) EXPECT_TRUE(solo[r]) << "round " << r;
  for (uint64_t r = 56; r < 80; ++r) EXPECT_FALSE(solo[r]) << "round " << r;
}

TEST(AdaptiveRegime, RoundsWithoutMeasuredPostsAndRoundsOutOfOrderCountForNothing) {
  detail::AdaptiveRegime regime(2, 4, 1.5);
  std::vector<detail::RankMeta> metas(2);
  for (uint64_t r = 0; r < 8; ++r) {
    // Rank r % 2 is 10x slower in round r: solo promises 1.8x; a flush round (no measured post)
    // and a replayed round must not change that.
    metas[0].compute_us = r % 2 == 0 ? 100'000 : 10'000;
    metas[1].compute_us = r % 2 == 1 ? 100'000 : 10'000;
    metas[0].measured = metas[1].measured = 1;
    metas[0].posts = metas[1].posts = 1;
    if (r == 5) {
      metas[0].measured = metas[1].measured = 0;  // a flush round
    }
    regime.observe(r, metas);
    regime.observe(r, metas);  // the same round again: ignored
  }
  regime.observe(100, metas);  // out of order: ignored
  // Window 3 (rounds 12-15) is decided from windows 0 and 1; round 5 carried nothing.
  EXPECT_TRUE(regime.solo(12));
  EXPECT_FALSE(regime.solo(0));
  EXPECT_FALSE(regime.solo(4));
  EXPECT_TRUE(regime.solo(8));
  // Rank 0 was slow in rounds 0, 2, 4, 6 and fast in 1, 3, 7: the slowest mean.
  EXPECT_NEAR(regime.predicted_speedup(), 100.0 / ((100.0 * 4 + 10.0 * 3) / 7), 1e-9);
}

// Adaptive rounds are synchronous until two windows (16 rounds each at result_depth 4) are
// measured, then follow the predicted speedup per epoch of solo rounds.
constexpr uint64_t kAdaptiveWindow = 16;

TEST(PartialAllreduce, AdaptiveGoesSoloUnderAStragglerThatMoves) {
  // Rank (i mod 4) sleeps 20 ms before its i-th post: a synchronous step waits 20 ms every time,
  // while each rank sleeps one step in four: solo rounds promise ~4x faster epochs.
  Scenario s;
  s.ranks = 4;
  s.mode = PartialMode::adaptive();
  s.iterations = 112;
  s.max_delay_us = 0;
  s.rotate_slow = true;
  s.slow_delay_ms = 20;
  auto rec = run_scenario(s);
  if (HasFailure()) return;
  expect_conservation_and_replicas(s, rec, "adaptive, moving straggler");
  const auto [sync_fresh, sync_n] = all_fresh_rounds(rec, s.ranks, 0, 2 * kAdaptiveWindow);
  EXPECT_EQ(sync_fresh, sync_n) << "the first two windows are synchronous";
  EXPECT_EQ(sync_n, static_cast<int>(2 * kAdaptiveWindow));
  // From window 3 on, solo: the round the straggler sleeps in goes on without it. Wide margin
  // (a descheduled rank can make a solo round look synchronous, never the reverse).
  const auto [solo_fresh, solo_n] = all_fresh_rounds(rec, s.ranks, 3 * kAdaptiveWindow, UINT64_MAX);
  ASSERT_GT(solo_n, 20);
  EXPECT_LE(solo_fresh, solo_n / 2)
      << solo_fresh << " of " << solo_n << " rounds from window 3 on were synchronous";
}

// Every rank sleeps 20 ms per step (equal pace), or rank 3 alone sleeps 30 ms at every step (a
// persistent straggler: an epoch lasts its shard whatever the rounds do): solo rounds would
// gain nothing per epoch, so the rounds stay synchronous.
void expect_adaptive_stays_synchronous(bool everybody_sleeps) {
  Scenario s;
  s.ranks = 4;
  s.mode = PartialMode::adaptive();
  s.iterations = 80;
  s.delay_probability = 0;
  // Equal pace predicts 1.0x plus the scheduling noise of the slowest rank each step; on a loaded
  // machine that noise must not reach the threshold (the arithmetic has exact tests above).
  if (everybody_sleeps) s.options.solo_speedup = 2.0;
  std::vector<RankRecord> rec(s.ranks);
  auto w = World::make(s.ranks, test_config(s.config));
  w->run([&](int rank, Communicator& comm) {
    Scenario mine = s;
    mine.slow_rank = everybody_sleeps ? rank : 3;
    mine.slow_delay_ms = everybody_sleeps ? 20 : 30;
    rec[rank] = run_rank(rank, comm, mine);
  });
  for (int r = 0; r < s.ranks; ++r) ASSERT_TRUE(rec[r].error.ok()) << rec[r].error.to_string();
  const std::string what = everybody_sleeps ? "adaptive, equal pace" : "adaptive, slow rank 3";
  expect_conservation_and_replicas(s, rec, what);
  const auto [all_fresh, n] = all_fresh_rounds(rec, s.ranks, 0, UINT64_MAX);
  ASSERT_GT(n, 60) << what;
  // Synchronous rounds wait for every fresh post: no exception, however the ranks are scheduled.
  EXPECT_EQ(all_fresh, n) << what << ": " << all_fresh << " of " << n << " rounds synchronous";
}

TEST(PartialAllreduce, AdaptiveStaysSynchronousWhenRanksKeepPace) {
  expect_adaptive_stays_synchronous(true);
}

TEST(PartialAllreduce, AdaptiveStaysSynchronousUnderAPersistentStraggler) {
  expect_adaptive_stays_synchronous(false);
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

// The round metadata rides in the tail of the data allreduce (collectives/partial/partial_meta.h):
// each rank writes only its own slots, the collective sums the tails, and every rank's values come
// back unchanged, in every data type, including values beyond one digit, with and without the
// adaptive section; the tail takes one 32-bit word per rank, 8 bytes in every type (two with it).
TEST(PartialMeta, EveryRanksValuesSurviveTheSumInEveryType) {
  for (DataType type : kAllDataTypes) {
    for (const bool compute : {false, true}) {
      for (int P : {1, 3, 13, 64}) {
        const size_t n = detail::meta_elements(type, P, compute);
        const size_t bytes = n * dtype_size(type);
        ASSERT_EQ(bytes, static_cast<size_t>(P) * (compute ? 16 : 8)) << dtype_name(type);
        std::vector<uint8_t> sum(bytes, 0), one(bytes);
        std::vector<detail::RankMeta> want(P);
        std::mt19937_64 rng(static_cast<uint64_t>(P) * 7 + static_cast<uint64_t>(type));
        for (int r = 0; r < P; ++r) {
          detail::RankMeta& m = want[r];
          const int pick = static_cast<int>(rng() % 4);
          m.posts = pick == 0   ? 0
                    : pick == 1 ? 1
                    : pick == 2 ? 257 + r
                                : detail::RankMeta::kMaxPosts - r;
          m.age = m.posts == 0 ? -1
                  : pick == 3  ? detail::RankMeta::kMaxAge
                               : static_cast<int>(rng() % 60000);
          m.fresh = m.posts > 0 && (rng() & 1);
          m.compute_us = pick == 3 ? detail::RankMeta::kMaxComputeUs
                                   : static_cast<uint32_t>(rng() % 5'000'000);
          m.measured = static_cast<int>(rng() % (detail::RankMeta::kMaxMeasured + 1));
          std::fill(one.begin(), one.end(), uint8_t{0});
          detail::write_rank_meta(one.data(), type, P, r, m, compute);
          reduce(type, ReduceOp::kSum, sum.data(), sum.data(), one.data(), n);
        }
        for (int r = 0; r < P; ++r) {
          const detail::RankMeta got = detail::read_rank_meta(sum.data(), type, P, r, compute);
          ASSERT_EQ(got.posts, want[r].posts) << dtype_name(type) << " P=" << P << " rank " << r;
          ASSERT_EQ(got.age, want[r].age) << dtype_name(type) << " P=" << P << " rank " << r;
          ASSERT_EQ(got.fresh, want[r].fresh) << dtype_name(type) << " P=" << P << " rank " << r;
          ASSERT_EQ(got.compute_us, compute ? want[r].compute_us : 0u) << dtype_name(type);
          ASSERT_EQ(got.measured, compute ? want[r].measured : 0) << dtype_name(type);
        }
      }
    }
  }
  // Out of range: clamped, never wrapped to a small number.
  std::vector<float> tail(detail::meta_elements(DataType::kFloat32, 1, true), 0.0f);
  detail::write_rank_meta(tail.data(), DataType::kFloat32, 1, 0,
                          {true, INT32_MAX, INT32_MAX, UINT32_MAX, 1000}, true);
  detail::RankMeta got = detail::read_rank_meta(tail.data(), DataType::kFloat32, 1, 0, true);
  EXPECT_EQ(got.age, detail::RankMeta::kMaxAge);
  EXPECT_EQ(got.posts, detail::RankMeta::kMaxPosts);
  EXPECT_TRUE(got.fresh);
  EXPECT_EQ(got.compute_us, detail::RankMeta::kMaxComputeUs);
  EXPECT_EQ(got.measured, detail::RankMeta::kMaxMeasured);
  std::fill(tail.begin(), tail.end(), 0.0f);
  detail::write_rank_meta(tail.data(), DataType::kFloat32, 1, 0, {false, 3, -5, 0, 0}, false);
  got = detail::read_rank_meta(tail.data(), DataType::kFloat32, 1, 0, false);
  EXPECT_EQ(got.posts, 0);
  EXPECT_EQ(got.age, 3);
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
