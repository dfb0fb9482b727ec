// EagerSgd on the in-process transport: identical replicas, conservation of every posted
// gradient, who blocks and who does not, and bad input.
#include "sgd/eager_sgd.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "tests/harness/thread_world.h"

namespace eagercomm::sgd {
namespace {

using namespace std::chrono_literals;
using test::World;

std::vector<PartialMode> all_modes() {
  return {PartialMode::sync(), PartialMode::solo(), PartialMode::majority(),
          PartialMode::quorum_of(2), PartialMode::adaptive()};
}

uint64_t checksum(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

// 100 steps under random delays, a stand-in model whose gradient depends on its parameters:
// after finish() every rank holds the same parameters, bit for bit, in every mode.
TEST(EagerSgd, ReplicasStayBitIdenticalUnderRandomDelaysInEveryMode) {
  const int P = 4;
  const size_t n = 257;
  for (PartialMode mode : all_modes()) {
    auto w = World::make(P, test::test_config());
    std::vector<std::vector<float>> params(P, std::vector<float>(n));
    std::vector<uint64_t> sums(P);
    std::vector<SgdStats> stats(P);
    w->run([&](int r, Communicator& c) {
      // Different starting points: create() must broadcast rank 0's.
      for (size_t i = 0; i < n; ++i) params[r][i] = static_cast<float>(r * 1000 + i) * 1e-3f;
      std::vector<float> grads(n);
      SgdOptions o;
      o.mode = mode;
      o.partial.seed = 7;
      o.lr.base = 0.05;
      o.lr.warmup_rounds = 10;
      o.lr.milestones = {60};
      o.momentum = 0.9;
      o.weight_decay = 1e-4;
      auto made = EagerSgd::create(c, params[r].data(), grads.data(), n, MemoryKind::kHost, o);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      EagerSgd& opt = *made.value();
      std::mt19937 prng(100 + r);
      for (int step = 0; step < 100; ++step) {
        for (size_t i = 0; i < n; ++i) {
          grads[i] = params[r][i] - static_cast<float>((i * (r + 1)) % 7);  // pulls to targets
        }
        if (prng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(prng() % 3000));
        ASSERT_TRUE(opt.step().ok());
      }
      ASSERT_TRUE(opt.finish().ok());
      sums[r] = checksum(params[r]);
      stats[r] = opt.stats();
    });
    for (int r = 1; r < P; ++r) {
      EXPECT_EQ(sums[r], sums[0]) << mode.name() << ": rank " << r << " diverged";
      EXPECT_EQ(stats[r].rounds_applied, stats[0].rounds_applied) << mode.name();
    }
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(stats[r].steps, 100u);
      EXPECT_EQ(stats[r].fresh_posts + stats[r].late_posts, 100u);
      EXPECT_GT(stats[r].rounds_applied, 0u);
    }
    if (mode.kind == PartialKind::kSync) {
      // One round per step, plus the flush's round (empty: nothing was carried).
      EXPECT_GE(stats[0].rounds_applied, 100u);
      EXPECT_LE(stats[0].rounds_applied, 101u);
      EXPECT_EQ(stats[0].fresh_contributions, 100u * P) << "sync: every post fresh";
    }
  }
}

// lr 1, no momentum, no decay: the parameters move by exactly minus the sum of every posted
// gradient (integer-valued, multiples of P so that the division by P stays exact).
TEST(EagerSgd, EveryPostedGradientIsAppliedExactlyOnce) {
  for (int P : {1, 3, 4}) {
    for (PartialMode mode : all_modes()) {
      if (mode.kind == PartialKind::kQuorum && mode.quorum > P) continue;
      const size_t n = 16;
      auto w = World::make(P, test::test_config());
      std::vector<std::vector<float>> params(P, std::vector<float>(n, 0.0f));
      std::vector<double> posted(n, 0.0);
      std::vector<std::vector<double>> posted_by(P, std::vector<double>(n, 0.0));
      w->run([&](int r, Communicator& c) {
        std::vector<float> grads(n);
        SgdOptions o;
        o.mode = mode;
        o.lr.base = 1.0;
        o.momentum = 0.0;
        auto made = EagerSgd::create(c, params[r].data(), grads.data(), n, MemoryKind::kHost, o);
        ASSERT_TRUE(made.ok()) << made.status().to_string();
        std::mt19937 prng(7 * r + 1);
        const int steps = 30 + r * 7;  // different numbers of steps per rank
        for (int s = 0; s < steps; ++s) {
          for (size_t i = 0; i < n; ++i) {
            grads[i] = static_cast<float>(P * static_cast<int>(prng() % 5));
            posted_by[r][i] += grads[i];
          }
          if (prng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
          ASSERT_TRUE(made.value()->step().ok());
        }
        ASSERT_TRUE(made.value()->finish().ok());
      });
      for (int r = 0; r < P; ++r) {
        for (size_t i = 0; i < n; ++i) posted[i] += posted_by[r][i];
      }
      for (int r = 0; r < P; ++r) {
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(-static_cast<double>(params[r][i]), posted[i] / P)
              << "P=" << P << " " << mode.name() << " rank " << r << " element " << i;
        }
      }
    }
  }
}

// Solo with one rank sleeping 30 ms per step, under both late policies: the fast ranks wait at
// (nearly) every step for the round their post started; the slow rank finds rounds completed and
// does not block, and its posts count as late whether they are carried or dropped.
TEST(EagerSgd, FastRanksWaitForTheirRoundSlowRanksGoOn) {
  for (LatePolicy late : {LatePolicy::kCarry, LatePolicy::kDrop}) {
    SCOPED_TRACE(late == LatePolicy::kCarry ? "late=carry" : "late=drop");
    const int P = 3;
    const size_t n = 64;
    auto w = World::make(P, test::test_config());
    std::vector<SgdStats> stats(P);
    std::atomic<bool> slow_done{false};
    w->run([&](int r, Communicator& c) {
      std::vector<float> params(n, 1.0f), grads(n, 0.5f);
      SgdOptions o;
      o.mode = PartialMode::solo();
      o.partial.late = late;
      o.momentum = 0.0;
      auto made = EagerSgd::create(c, params.data(), grads.data(), n, MemoryKind::kHost, o);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      // The fast ranks keep training while the slow one does its 10 steps.
      for (int s = 0; r == 0 ? s < 10 : !slow_done.load(); ++s) {
        std::fill(grads.begin(), grads.end(), 0.5f);
        if (r == 0) std::this_thread::sleep_for(30ms);
        ASSERT_TRUE(made.value()->step().ok());
      }
      if (r == 0) slow_done = true;
      ASSERT_TRUE(made.value()->finish().ok());
      stats[r] = made.value()->stats();
    });
    // Wide margins: a scheduler hiccup may make a step of the slow rank block or be fresh.
    EXPECT_LE(stats[0].blocking_steps, 3u) << "the slow rank blocked at most steps";
    EXPECT_GE(stats[0].late_posts, 7u);
    EXPECT_EQ(stats[0].late_posts + stats[0].fresh_posts, 10u);
    for (int r = 1; r < P; ++r) {
      EXPECT_GE(stats[r].blocking_steps, 5u) << "rank " << r << " should wait for its rounds";
    }
    // Solo: the first fresh post activates a round, so the two fast ranks race for it and the
    // loser's post is late; together they post fresh in most rounds.
    EXPECT_GE(stats[1].fresh_posts + stats[2].fresh_posts, 10u);
    EXPECT_GT(stats[0].computing, stats[0].waiting) << "the slow rank mostly computes";
  }
}

TEST(EagerSgdBadInput, BadArgumentsFailOnEveryRankWithoutHanging) {
  const int P = 3;
  struct Case {
    const char* what;
    std::function<void(int, SgdOptions&, MemoryKind&, size_t&, bool&)> spoil;
    StatusCode bad_rank_code;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"cuda memory",
       [](int r, SgdOptions&, MemoryKind& m, size_t&, bool&) {
         if (r == 1) m = MemoryKind::kCuda;
       },
       StatusCode::kNotSupported, "CUDA"},
      {"negative lr",
       [](int r, SgdOptions& o, MemoryKind&, size_t&, bool&) {
         if (r == 1) o.lr.base = -1;
       },
       StatusCode::kInvalidArgument, "base rate"},
      {"momentum 1",
       [](int r, SgdOptions& o, MemoryKind&, size_t&, bool&) {
         if (r == 1) o.momentum = 1.0;
       },
       StatusCode::kInvalidArgument, "momentum"},
      {"average decay 1",
       [](int r, SgdOptions& o, MemoryKind&, size_t&, bool&) {
         if (r == 1) o.average_decay = 1.0;
       },
       StatusCode::kInvalidArgument, "average decay"},
      {"negative timeout",
       [](int r, SgdOptions& o, MemoryKind&, size_t&, bool&) {
         if (r == 1) o.timeout = std::chrono::seconds(-5);
       },
       StatusCode::kInvalidArgument, "timeout"},
      {"unsorted milestones",
       [](int r, SgdOptions& o, MemoryKind&, size_t&, bool&) {
         if (r == 1) o.lr.milestones = {10, 5};
       },
       StatusCode::kInvalidArgument, "ascending"},
      {"null buffer",
       [](int r, SgdOptions&, MemoryKind&, size_t&, bool& null) {
         if (r == 1) null = true;
       },
       StatusCode::kInvalidArgument, "null"},
      {"different counts",
       [](int r, SgdOptions&, MemoryKind&, size_t& n, bool&) {
         if (r == 1) n = 9;
       },
       StatusCode::kMismatch, "count"},
  };
  for (const Case& k : cases) {
    auto w = World::make(P, test::test_config());
    std::vector<Status> st(P);
    w->run([&](int r, Communicator& c) {
      SgdOptions o;
      MemoryKind m = MemoryKind::kHost;
      size_t n = 8;
      bool null = false;
      k.spoil(r, o, m, n, null);
      std::vector<float> params(16), grads(16);
      auto made = EagerSgd::create(c, null ? nullptr : params.data(), grads.data(), n, m, o);
      st[r] = made.status();
    });
    EXPECT_EQ(st[1].code(), k.bad_rank_code) << k.what << ": " << st[1].to_string();
    EXPECT_NE(st[1].message().find(k.needle), std::string::npos)
        << k.what << ": " << st[1].message();
    for (int r : {0, 2}) {
      EXPECT_FALSE(st[r].ok()) << k.what << ": rank " << r << " must fail too";
      EXPECT_NE(st[r].message().find("rank 1"), std::string::npos) << st[r].message();
    }
  }
}

TEST(LrSchedule, WarmUpThenStepDecay) {
  LrSchedule s;
  s.base = 0.1;
  s.warmup_rounds = 10;
  s.warmup_start = 0.1;
  s.milestones = {20, 30};
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(s.at(0), 0.01);
  EXPECT_NEAR(s.at(5), 0.1 * (0.1 + 0.9 * 0.5), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(10), 0.1);
  EXPECT_DOUBLE_EQ(s.at(20), 0.05);
  EXPECT_DOUBLE_EQ(s.at(35), 0.025);
  EXPECT_TRUE(s.validate().ok());
  auto m = parse_milestones("100,200");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m.value(), (std::vector<uint64_t>{100, 200}));
  EXPECT_FALSE(parse_milestones("100,x").ok());
  EXPECT_FALSE(parse_milestones("-5").ok());
  s.gamma = 0;
  EXPECT_NE(s.validate().message().find("gamma"), std::string::npos);
}

}  // namespace
}  // namespace eagercomm::sgd
