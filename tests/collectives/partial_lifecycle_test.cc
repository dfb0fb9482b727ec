// Partial allreduce: bad input, back-pressure, progress without the application, destroy while
// rounds are in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>

#include "runtime/build_config.h"
#include "tests/collectives/partial_scenario.h"

namespace eagercomm::test {
namespace {

using namespace std::chrono_literals;

// Creates one object per rank (each on its own thread) with per-rank arguments.
std::vector<Result<std::unique_ptr<PartialAllreduce>>> create_all(
    World& w, const std::function<size_t(int)>& count, const std::function<PartialMode(int)>& mode,
    const std::function<PartialOptions(int)>& options) {
  std::vector<Result<std::unique_ptr<PartialAllreduce>>> out;
  for (int r = 0; r < w.size(); ++r) out.emplace_back(Status(StatusCode::kInternal, "unset"));
  w.run([&](int r, Communicator& c) {
    out[r] = PartialAllreduce::create(c, count(r), DataType::kFloat32, mode(r), options(r));
  });
  return out;
}

TEST(PartialBadInput, RanksThatCreateWithDifferentArgumentsAllFail) {
  const int P = 3;
  auto w = World::make(P, test_config());
  auto counts = create_all(
      *w, [](int r) { return r == 2 ? 11 : 10; }, [](int) { return PartialMode::solo(); },
      [](int) { return PartialOptions{}; });
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(counts[r].ok()) << "rank " << r;
    EXPECT_EQ(counts[r].status().code(), StatusCode::kMismatch);
    EXPECT_NE(counts[r].status().message().find("count=10"), std::string::npos)
        << counts[r].status().message();
    EXPECT_NE(counts[r].status().message().find("rank 2"), std::string::npos);
    // Every rank names the same ranks and argument (they agree on the lowest rank that differs).
    EXPECT_EQ(counts[r].status().message(), counts[0].status().message());
  }
  // Two ranks differ: the lowest is named, everywhere.
  auto two = create_all(
      *w, [](int r) { return r == 0 ? 10 : 12 + r; }, [](int) { return PartialMode::solo(); },
      [](int) { return PartialOptions{}; });
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(two[r].ok());
    EXPECT_NE(two[r].status().message().find("rank 1 with count=13"), std::string::npos)
        << two[r].status().message();
  }
  auto modes = create_all(
      *w, [](int) { return 10; },
      [](int r) { return r == 1 ? PartialMode::majority() : PartialMode::solo(); },
      [](int) { return PartialOptions{}; });
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(modes[r].ok());
    EXPECT_NE(modes[r].status().message().find("majority"), std::string::npos)
        << modes[r].status().message();
  }
  auto opts = create_all(
      *w, [](int) { return 10; }, [](int) { return PartialMode::solo(); },
      [](int r) {
        PartialOptions o;
        o.sync_every = r == 0 ? 4 : 5;
        return o;
      });
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(opts[r].ok());
    EXPECT_NE(opts[r].status().message().find("sync_every"), std::string::npos);
  }
  // The communicator still works, and a matching create succeeds afterwards.
  auto good = create_all(
      *w, [](int) { return 10; }, [](int) { return PartialMode::solo(); },
      [](int) { return PartialOptions{}; });
  for (int r = 0; r < P; ++r) EXPECT_TRUE(good[r].ok()) << good[r].status().to_string();
}

TEST(PartialBadInput, ModesAndOptionsOutOfRangeAreRejectedOnEveryRank) {
  const int P = 3;
  auto w = World::make(P, test_config());
  for (int k : {0, -1, P + 1}) {
    auto res = create_all(
        *w, [](int) { return 4; }, [k](int) { return PartialMode::quorum_of(k); },
        [](int) { return PartialOptions{}; });
    for (int r = 0; r < P; ++r) {
      ASSERT_FALSE(res[r].ok());
      EXPECT_EQ(res[r].status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(res[r].status().message().find("quorum"), std::string::npos);
    }
  }
  for (uint32_t depth : {0u, 5000u}) {
    auto res = create_all(
        *w, [](int) { return 4; }, [](int) { return PartialMode::solo(); },
        [depth](int) {
          PartialOptions o;
          o.result_depth = depth;
          return o;
        });
    for (int r = 0; r < P; ++r) {
      ASSERT_FALSE(res[r].ok());
      EXPECT_NE(res[r].status().message().find("result_depth"), std::string::npos);
    }
  }
  for (double speedup : {0.5, 11.0, std::nan("")}) {
    auto res = create_all(
        *w, [](int) { return 4; }, [](int) { return PartialMode::adaptive(); },
        [speedup](int) {
          PartialOptions o;
          o.solo_speedup = speedup;
          return o;
        });
    for (int r = 0; r < P; ++r) {
      ASSERT_FALSE(res[r].ok()) << "solo_speedup " << speedup;
      EXPECT_NE(res[r].status().message().find("solo_speedup is not in [1, 10]"), std::string::npos)
          << res[r].status().message();
    }
  }
  // Ranks that disagree on it would decide different regimes: refused, naming it.
  auto mixed = create_all(
      *w, [](int) { return 4; }, [](int) { return PartialMode::adaptive(); },
      [](int r) {
        PartialOptions o;
        o.solo_speedup = r == 2 ? 2.0 : 1.3;
        return o;
      });
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(mixed[r].ok());
    EXPECT_NE(mixed[r].status().message().find("solo_speedup"), std::string::npos)
        << mixed[r].status().message();
  }
  EXPECT_EQ(parse_on_failure("fail").value(), OnFailure::kFail);
  EXPECT_EQ(parse_on_failure("continue").value(), OnFailure::kContinue);
  EXPECT_NE(parse_on_failure("Continue").status().message().find("'Continue' is neither"),
            std::string::npos);
  EXPECT_FALSE(parse_partial_mode("quorum:x").ok());
  EXPECT_FALSE(parse_partial_mode("fast").ok());
  EXPECT_EQ(parse_partial_mode("quorum(3)").value().quorum, 3);
  EXPECT_EQ(parse_partial_mode("quorum:2").value().kind, PartialKind::kQuorum);
  // Deadlines: a duration from 1 us to 1 h, or auto; the name reads back.
  EXPECT_EQ(parse_partial_mode("deadline:5ms").value().name(), "deadline(5ms)");
  EXPECT_EQ(parse_partial_mode("deadline(250us)").value().deadline.count(), 250);
  EXPECT_EQ(parse_partial_mode("deadline:auto").value().name(), "deadline(auto)");
  EXPECT_EQ(parse_partial_mode("deadline(auto)").value().deadline.count(), 0);
  for (const char* bad : {"deadline:0", "deadline:2h", "deadline:", "deadline:soon", "deadline(5ms",
                          "deadline:-1ms", "deadline:100ns"}) {
    Result<PartialMode> m = parse_partial_mode(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_NE(m.status().message().find("deadline"), std::string::npos)
        << bad << ": " << m.status().message();
  }
  // Out of range through the C++ API, and ranks that disagree on T: refused, naming it.
  for (auto t : {std::chrono::microseconds(-5), std::chrono::microseconds(3'600'000'001)}) {
    auto res = create_all(
        *w, [](int) { return 4; }, [t](int) { return PartialMode::deadline_of(t); },
        [](int) { return PartialOptions{}; });
    for (int r = 0; r < P; ++r) {
      ASSERT_FALSE(res[r].ok());
      EXPECT_EQ(res[r].status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(res[r].status().message().find("deadline"), std::string::npos)
          << res[r].status().message();
    }
  }
  auto deadlines = create_all(
      *w, [](int) { return 4; },
      [](int r) {
        return r == 1 ? PartialMode::deadline_auto()
                      : PartialMode::deadline_of(std::chrono::milliseconds(5));
      },
      [](int) { return PartialOptions{}; });
  for (int r = 0; r < P; ++r) {
    ASSERT_FALSE(deadlines[r].ok());
    EXPECT_NE(deadlines[r].status().message().find(
                  "rank 0 created it in mode deadline(5ms) but rank 1 in deadline(auto)"),
              std::string::npos)
        << deadlines[r].status().message();
  }
}

TEST(PartialBadInput, WrongPostsAndUseAfterDestroy) {
  auto w = World::make(2, test_config());
  auto objs = create_all(
      *w, [](int) { return 8; }, [](int) { return PartialMode::solo(); },
      [](int) { return PartialOptions{}; });
  ASSERT_TRUE(objs[0].ok() && objs[1].ok());
  PartialAllreduce& pa = *objs[0].value();
  std::vector<float> g(9, 1.0f);
  std::vector<double> d(8, 1.0);
  Status wrong_count = pa.post(g.data(), 9, DataType::kFloat32);
  EXPECT_EQ(wrong_count.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_count.message().find("9"), std::string::npos) << wrong_count.message();
  EXPECT_EQ(pa.post(d.data(), 8, DataType::kFloat64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pa.post(nullptr, 8, DataType::kFloat32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pa.stats().posts, 0u) << "a rejected post must not add anything";
  pa.destroy();
  EXPECT_EQ(pa.post(g.data(), 8, DataType::kFloat32).code(), StatusCode::kAborted);
  EXPECT_EQ(pa.poll().status().code(), StatusCode::kAborted);
  EXPECT_EQ(pa.flush(nullptr).status().code(), StatusCode::kAborted);
  pa.destroy();  // idempotent
  // The peer learns that rank 0 stopped: its rounds fail instead of hanging.
  PartialAllreduce& other = *objs[1].value();
  Status posted = other.post(g.data(), 8, DataType::kFloat32);  // may already know
  EXPECT_TRUE(posted.ok() || posted.code() == StatusCode::kPeerFailed) << posted.to_string();
  auto r = other.wait(30s);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPeerFailed) << r.status().to_string();
}

TEST(PartialAllreduce, BackPressureHoldsRoundsInsteadOfOverwriting) {
  // Rank 1 takes no results for a while: with result_depth 2 it stops entering rounds after
  // two, so rank 0 cannot get further ahead; nothing is overwritten.
  auto w = World::make(2, test_config());
  PartialOptions o;
  o.result_depth = 2;
  auto objs = create_all(
      *w, [](int) { return 4; }, [](int) { return PartialMode::solo(); }, [o](int) { return o; });
  ASSERT_TRUE(objs[0].ok() && objs[1].ok());
  PartialAllreduce& fast = *objs[0].value();
  PartialAllreduce& lazy = *objs[1].value();
  std::vector<float> g(4);
  int completed = 0;
  for (int i = 0; i < 6; ++i) {
    std::fill(g.begin(), g.end(), static_cast<float>(i + 1));
    ASSERT_TRUE(fast.post(g.data(), 4, DataType::kFloat32).ok());
    auto r = fast.wait(300ms);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kTimeout) << r.status().to_string();
      break;
    }
    ASSERT_EQ(r.value().as<float>()[0], static_cast<float>(i + 1));
    ++completed;
  }
  EXPECT_EQ(completed, 2) << "the lazy rank must stop taking part after result_depth rounds";
  // Now the lazy rank consumes: every round arrives, in order, with its own data.
  std::vector<float> seen;
  for (int i = 0; i < 3; ++i) {
    auto r = lazy.wait(30s);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r.value().round(), static_cast<uint64_t>(i));
    seen.push_back(r.value().as<float>()[0]);
  }
  EXPECT_EQ(seen, (std::vector<float>{1, 2, 3}));
  auto r = fast.wait(30s);  // the round that was held back completes once the lazy rank consumed
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().round(), 2u);
  EXPECT_EQ(r.value().as<float>()[0], 3.0f);
}

TEST(PartialAllreduce, ProgressThreadContributesWhileTheApplicationSleeps) {
  // Rank 1 posts once and then sleeps without calling anything; rounds that rank 0 starts still
  // complete (rank 1's progress thread takes part, contributing what rank 1 posted).
  auto w = World::make(2, test_config());
  auto objs = create_all(
      *w, [](int) { return 16; }, [](int) { return PartialMode::solo(); },
      [](int) { return PartialOptions{}; });
  ASSERT_TRUE(objs[0].ok() && objs[1].ok());
  std::vector<float> g(16, 1.0f);
  std::atomic<bool> posted{false};
  std::thread sleeper([&] {
    ASSERT_TRUE(objs[1].value()->post(g.data(), 16, DataType::kFloat32).ok());
    posted = true;
    std::this_thread::sleep_for(800ms);
  });
  while (!posted) std::this_thread::yield();
  PartialAllreduce& fast = *objs[0].value();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fast.post(g.data(), 16, DataType::kFloat32).ok());
  float total = 0;
  while (total < 4.0f) {
    auto r = fast.wait(30s);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    total += r.value().as<float>()[0];
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 600ms) << "rounds waited for the sleeper";
  EXPECT_EQ(total, 4.0f) << "3 posts of rank 0 plus rank 1's single post";
  sleeper.join();
}

TEST(PartialAllreduce, WorksWithoutAProgressThread) {
  Scenario s;
  s.ranks = 3;
  s.iterations = 60;
  s.config = {{"EAGERCOMM_PROGRESS_THREAD", "off"}};
  for (const PartialMode& mode : {PartialMode::solo(), PartialMode::majority()}) {
    s.mode = mode;
    auto rec = run_scenario(s);
    if (HasFailure()) return;
    double total = 0, posted = 0;
    for (const Received& x : rec[0].results) total += x.data[0];
    for (const auto& r : rec) posted += r.posted[0];
    EXPECT_EQ(total, posted) << mode.name();
  }
}

// Rank `leaver` destroys its object while the others' rounds are in flight: every other rank
// fails with kPeerFailed naming it, never a timeout. Its closed notice travels down a binomial
// tree rooted at it (CommCore::send_stream_closed), relayed by ranks whatever their own state: a
// rank the tree missed would wait 30 s. Over inproc the rounds run the direct algorithm, whose
// failed rounds wait for the peers they lent buffers to; the closed notice (same key as such a
// round) must still reach the stream, and a peer whose object is gone must still answer a
// lender (both were lost once: a rank waited 30 s for its round, about one world in 700).
void destroy_while_in_flight(int P, int leaver, int worlds) {
  for (int world = 0; world < worlds; ++world) {
    auto w = World::make(P, test_config());
    std::vector<Status> st(P);
    w->run([&](int r, Communicator& c) {
      auto made = PartialAllreduce::create(c, 1 << 16, DataType::kFloat32, PartialMode::solo());
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      std::unique_ptr<PartialAllreduce> pa = std::move(made).value();
      std::vector<float> g(1 << 16, 1.0f);
      for (int i = 0;; ++i) {
        if (r == leaver && i == 5 + world % 5) {
          pa.reset();  // destroyed mid-stream, rounds in flight
          return;
        }
        Status s = pa->post(g.data(), g.size(), DataType::kFloat32);
        if (!s.ok()) {
          st[r] = s;
          return;
        }
        auto res = pa->wait(30s);
        if (!res.ok()) {
          st[r] = res.status();
          return;
        }
        if (i > 10000) return;
      }
    });
    const std::string named = "rank " + std::to_string(leaver) + " ";
    for (int r = 0; r < P; ++r) {
      if (r == leaver) continue;
      ASSERT_EQ(st[r].code(), StatusCode::kPeerFailed)
          << "P=" << P << " world " << world << " rank " << r << ": " << st[r].to_string();
      EXPECT_NE(st[r].message().find(named), std::string::npos) << st[r].message();
    }
  }
}

TEST(PartialAllreduce, DestroyWhileRoundsAreInFlightIsCleanEverywhere) {
  destroy_while_in_flight(4, 0, 5);
  // Trees rooted elsewhere, P not a power of two: relays wrap around rank P - 1.
  destroy_while_in_flight(7, 5, 3);
  destroy_while_in_flight(13, 6, 2);
}

TEST(PartialAllreduce, DestroyWhileRoundsAreInFlightManyTimes) {
  // Many worlds: the interleavings that once lost a closed notice are rare.
  destroy_while_in_flight(4, 0, std::string(EAGERCOMM_SANITIZER).empty() ? 400 : 60);
  destroy_while_in_flight(7, 3, std::string(EAGERCOMM_SANITIZER).empty() ? 100 : 20);
}

// A rank whose flush() returned may destroy its object at once: peers still inside their flush
// (the exchange not yet over there) must finish theirs, with every post accounted for.
// With on_failure=continue too: such a departure is no failure to continue through (the rank still
// flushing would otherwise shrink the group and flush again alone).
void leave_right_after_flush(OnFailure on_failure) {
  for (int P : {2, 3, 5}) {
    for (int iteration = 0; iteration < 100; ++iteration) {
      // A short timeout: a rank that took the departure for a failure would fail fast (its shrink
      // waits that long for the ranks that left).
      auto w = World::make(P, test_config({{"EAGERCOMM_TIMEOUT", "10s"}}));
      std::vector<Status> st(P);
      std::vector<double> posted(P, 0), summed(P, 0);
      std::vector<uint32_t> generation(P, 0);
      w->run([&](int r, Communicator& c) {
        PartialOptions o;
        o.on_failure = on_failure;
        auto made = PartialAllreduce::create(c, 4, DataType::kFloat32, PartialMode::solo(), o);
        ASSERT_TRUE(made.ok()) << made.status().to_string();
        std::unique_ptr<PartialAllreduce> pa = std::move(made).value();
        std::mt19937 prng(1000 * iteration + r);
        const int posts = 1 + static_cast<int>(prng() % 3);
        for (int i = 0; i < posts; ++i) {
          std::vector<float> g(4, static_cast<float>(r + 1));
          ASSERT_TRUE(pa->post(g.data(), g.size(), DataType::kFloat32).ok());
          posted[r] += 4.0 * (r + 1);
        }
        if (prng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(prng() % 2000));
        Result<uint64_t> flushed = pa->flush([&](RoundResult&& x) {
          for (size_t i = 0; i < 4; ++i) summed[r] += x.as<float>()[i];
        });
        st[r] = flushed.status();
        generation[r] = c.generation();
        pa.reset();  // no barrier: leave while the others may still be inside flush()
      });
      double total = 0;
      for (int r = 0; r < P; ++r) total += posted[r];
      for (int r = 0; r < P; ++r) {
        ASSERT_TRUE(st[r].ok()) << "P=" << P << " iteration " << iteration << " rank " << r << ": "
                                << st[r].to_string();
        EXPECT_EQ(summed[r], total) << "P=" << P << " rank " << r;
        ASSERT_EQ(generation[r], 0u) << "P=" << P << " iteration " << iteration << " rank " << r
                                     << " shrank the communicator";
      }
    }
  }
}

TEST(PartialAllreduce, RanksThatLeaveRightAfterFlushNeverFailPeersStillFlushing) {
  leave_right_after_flush(OnFailure::kFail);
}

TEST(PartialAllreduce, RanksThatLeaveRightAfterFlushAreNoFailureToContinueThrough) {
  leave_right_after_flush(OnFailure::kContinue);
}

}  // namespace
}  // namespace eagercomm::test
