// The small-box allreduce (collectives/engine/small_boxes.h, allreduce_small.cc): it is really the
// path taken (no mailbox message), slots are reused correctly with many calls in flight,
// mismatches and departures fail every rank without corrupting buffers, sleeping ranks are
// woken, and ranks configured with different box sizes refuse to start.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "collectives/algorithms/algorithms.h"
#include "collectives/engine/small_boxes.h"
#include "runtime/store.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

using std::chrono::milliseconds;
constexpr auto kNoHang = std::chrono::seconds(60);

Config small_config(const char* max_bytes = "2KiB") {
  return test_config({{"EAGERCOMM_SMALL_MAX_BYTES", max_bytes}, {"EAGERCOMM_TIMEOUT", "60s"}});
}

TEST(SmallAllreduce, TakesNoMailboxMessageAndGivesIdenticalResults) {
  for (int P : {2, 3, 4, 5, 8}) {
    auto w = World::make(P, small_config());
    std::vector<std::vector<float>> out(P);
    w->run([&](int r, Communicator& c) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{512}}) {
        const uint64_t sent = c.stats().messages_sent;
        // Values whose float sum depends on the order: the replicas must still agree bit
        // for bit.
        std::vector<float> in(count), res(count, -1.0f);
        for (size_t i = 0; i < count; ++i) in[i] = 1.0f / static_cast<float>(3 + r + i);
        ASSERT_TRUE(
            c.allreduce(in.data(), res.data(), count, DataType::kFloat32, ReduceOp::kSum).ok());
        EXPECT_EQ(c.stats().messages_sent, sent) << "count " << count << ": not the small path";
        for (size_t i = 0; i < count; ++i) {
          double expect = 0;
          for (int q = 0; q < P; ++q) expect += 1.0 / (3 + q + i);
          ASSERT_NEAR(res[i], expect, 1e-5) << "rank " << r << " element " << i;
        }
        if (count == 512) out[r] = res;
      }
    });
    for (int r = 1; r < P; ++r) {
      ASSERT_EQ(std::memcmp(out[r].data(), out[0].data(), 512 * sizeof(float)), 0)
          << "P=" << P << ": rank " << r << " differs from rank 0";
    }
  }
}

TEST(SmallAllreduce, InPlaceKeepsEveryRanksInputUntilTheEnd) {
  // Rank r >= 2 reduces into its own input after ranks 0 and 1: it must keep a copy.
  for (int P : {3, 4, 6}) {
    auto w = World::make(P, small_config());
    w->run([&](int r, Communicator& c) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<int64_t> x(33, r + 1);
        ASSERT_TRUE(c.allreduce(x.data(), x.data(), x.size(), DataType::kInt64, op).ok());
        const int64_t expect = op == ReduceOp::kSum   ? P * (P + 1) / 2
                               : op == ReduceOp::kMax ? P
                                                      : 1;
        for (int64_t v : x) ASSERT_EQ(v, expect) << "rank " << r;
      }
    });
  }
}

TEST(SmallAllreduce, ManyCallsInFlightReuseSlotsInOrder) {
  // Three times more calls in flight than slots per pair: call n + kDepth waits for call n's
  // slot, and no rank ever combines contributions of different calls.
  const int P = 4, kCalls = 24;
  auto w = World::make(P, small_config());
  w->run([&](int r, Communicator& c) {
    std::vector<std::vector<int32_t>> bufs(kCalls);
    std::vector<Request> reqs;
    for (int n = 0; n < kCalls; ++n) {
      bufs[n].assign(5, (n + 1) * (r + 1));
      auto req = c.allreduce_async(bufs[n].data(), bufs[n].data(), bufs[n].size(), DataType::kInt32,
                                   ReduceOp::kSum);
      ASSERT_TRUE(req.ok()) << req.status().to_string();
      reqs.push_back(req.value());
      if (r == n % P) std::this_thread::sleep_for(milliseconds(1));  // each rank lags in turn
    }
    for (int n = 0; n < kCalls; ++n) {
      ASSERT_TRUE(reqs[n].wait(kNoHang).ok()) << "call " << n;
      for (int32_t v : bufs[n]) ASSERT_EQ(v, (n + 1) * P * (P + 1) / 2) << "call " << n;
    }
  });
}

TEST(SmallAllreduce, MixesWithLargeAndAsynchronousCalls) {
  const int P = 3;
  auto w = World::make(P, small_config());
  w->run([&](int r, Communicator& c) {
    for (int round = 0; round < 20; ++round) {
      std::vector<float> big(100000, 1.0f), small(3, static_cast<float>(r));
      auto b =
          c.allreduce_async(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
      ASSERT_TRUE(b.ok());
      ASSERT_TRUE(
          c.allreduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kMax)
              .ok());
      ASSERT_TRUE(b.value().wait(kNoHang).ok());
      EXPECT_EQ(small[2], static_cast<float>(P - 1));
      EXPECT_EQ(big[99999], static_cast<float>(P));
    }
  });
}

TEST(SmallAllreduce, CountsOnBothSidesOfTheLimitFailEveryRankWithAMismatch) {
  // Rank P-1's count puts it above EAGERCOMM_SMALL_MAX_BYTES: it sends a message where the
  // others store into boxes. Every rank must report the mismatch, none may hang or write.
  for (int P : {2, 3, 4, 7}) {
    auto w = World::make(P, small_config("2KiB"));
    const size_t base = 2048 / sizeof(float);
    std::vector<std::vector<float>> bufs(P, std::vector<float>(base + 1, 7.0f));
    std::vector<Status> st(P);
    w->run([&](int r, Communicator& c) {
      const size_t count = r == P - 1 ? base + 1 : base;
      auto req = c.allreduce_async(bufs[r].data(), bufs[r].data(), count, DataType::kFloat32,
                                   ReduceOp::kSum);
      st[r] = req.ok() ? req.value().wait(kNoHang) : req.status();
    });
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(st[r].code(), StatusCode::kMismatch)
          << "P=" << P << " rank " << r << ": " << st[r].to_string();
      for (float x : bufs[r]) ASSERT_EQ(x, 7.0f) << "rank " << r << "'s buffer was written";
    }
    EXPECT_NE(st[0].message().find("count="), std::string::npos) << st[0].message();
    // The boxes and the sequence stay consistent: later calls work.
    w->run([&](int r, Communicator& c) {
      for (int n = 0; n < 20; ++n) {
        int32_t x = r;
        Status s = c.allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum);
        ASSERT_TRUE(s.ok()) << "call " << n << " on rank " << r << ": " << s.to_string();
        ASSERT_EQ(x, P * (P - 1) / 2);
      }
    });
  }
}

TEST(SmallAllreduce, AMismatchInsideTheBoxesLeavesTheSlotsUsable) {
  const int P = 3;
  auto w = World::make(P, small_config());
  for (int round = 0; round < 12; ++round) {  // more rounds than slots: leftovers are reclaimed
    std::vector<Status> st(P);
    w->run([&](int r, Communicator& c) {
      std::vector<double> x(4, 2.0);
      const DataType t = r == 1 ? DataType::kInt64 : DataType::kFloat64;
      st[r] = c.allreduce(x.data(), x.data(), x.size(), t, ReduceOp::kSum);
      EXPECT_EQ(x[0], 2.0) << "rank " << r;
      int32_t y = 1;
      ASSERT_TRUE(c.allreduce(&y, &y, 1, DataType::kInt32, ReduceOp::kSum).ok());
      EXPECT_EQ(y, P);
    });
    for (int r = 0; r < P; ++r) EXPECT_EQ(st[r].code(), StatusCode::kMismatch) << st[r].to_string();
  }
}

TEST(SmallAllreduce, ASleepingRankIsWokenByItsPeer) {
  const int P = 2;
  auto w = World::make(P, small_config());
  w->run([&](int r, Communicator& c) {
    for (int n = 0; n < 5; ++n) {
      // Rank 1 arrives 30 ms late: rank 0 has long gone to sleep on its boxes by then.
      if (r == 1) std::this_thread::sleep_for(milliseconds(30));
      const auto t0 = std::chrono::steady_clock::now();
      int32_t x = 1;
      ASSERT_TRUE(c.allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum).ok());
      ASSERT_EQ(x, 2);
      if (r == 0) {
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
      }
    }
  });
  EXPECT_GT(w->comms[0]->stats().engine_blocks, 0u) << "rank 0 never slept";
}

TEST(SmallAllreduce, APeerThatLeavesFailsTheCallInsteadOfHangingIt) {
  const int P = 3;
  auto w = World::make(P, small_config());
  std::vector<Status> st(P);
  w->run([&](int r, Communicator& c) {
    if (r == 2) {
      std::this_thread::sleep_for(milliseconds(50));
      c.destroy();
      return;
    }
    int32_t x = 1;
    st[r] = c.allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(x, 1) << "rank " << r;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kPeerFailed) << st[r].to_string();
    EXPECT_NE(st[r].message().find("rank 2"), std::string::npos) << st[r].message();
  }
}

TEST(SmallAllreduce, RanksWithDifferentBoxSizesRefuseToStart) {
  const int P = 3;
  HashStore store;
  std::vector<Config> configs = {small_config("2KiB"), small_config("2KiB"), small_config("1KiB")};
  std::vector<Status> st(P);
  run_threads(P, [&](int r) {
    CommunicatorOptions opts;
    opts.config = &configs[r];
    opts.in_process = true;
    opts.scope = "boxes";
    auto c = Communicator::create(store, r, P, opts);
    st[r] = c.status();
  });
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kMismatch) << "rank " << r << ": " << st[r].to_string();
    EXPECT_NE(st[r].message().find("EAGERCOMM_SMALL_MAX_BYTES"), std::string::npos)
        << st[r].message();
  }
}

TEST(SmallAllreduce, OffMeansTheMailboxPath) {
  auto w = World::make(2, small_config("0"));
  w->run([&](int r, Communicator& c) {
    const uint64_t sent = c.stats().messages_sent;
    int32_t x = r;
    ASSERT_TRUE(c.allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(x, 1);
    EXPECT_GT(c.stats().messages_sent, sent);
  });
}

// A partial allreduce's rounds through its own boxes (make_round_allreduce, numbered by round),
// driven here by hand on two inproc transports: rank 0 starts SmallBoxes::kDepth + 2 rounds
// before rank 1 has consumed anything, so its stores of the last two wait for room and say so
// (waits_for_room: nobody announces the room, the engine must look again), each store wakes
// rank 1 through its transport (its wait() ends at once), and once rank 1 runs its rounds every
// round completes on both ranks with the same sum.
TEST(RoundBoxes, ARankTooFarAheadWaitsForRoomAndItsStoresWakeThePeer) {
  using detail::SmallBoxes;
  constexpr int kRounds = static_cast<int>(SmallBoxes::kDepth) + 2;
  constexpr size_t kCount = 5;
  Transports t(2, "round-boxes");
  std::unique_ptr<SmallBoxes> boxes[2];
  for (int r = 0; r < 2; ++r) {
    auto made = SmallBoxes::create(t[r], kCount * sizeof(float));
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    boxes[r] = std::move(made).value();
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(boxes[r]->connect_peer(1 - r, boxes[1 - r]->key()).ok());
  }
  detail::OpContext ctx[2] = {{0, 2, nullptr, &t[0], &t.config, nullptr},
                              {1, 2, nullptr, &t[1], &t.config, nullptr}};
  detail::OpSignature sig;
  sig.coll = static_cast<uint8_t>(detail::CollKind::kAllreduce);
  sig.dtype = static_cast<uint8_t>(DataType::kFloat32);
  sig.redop = static_cast<uint8_t>(ReduceOp::kSum);
  sig.count = kCount;
  sig.reserved = static_cast<uint8_t>(detail::Algo::kSmall);
  auto value = [](int rank, int round, size_t i) {
    return static_cast<float>(rank * 1000 + round * 10 + static_cast<int>(i));
  };
  std::vector<float> buf[2][kRounds];
  std::shared_ptr<detail::Op> ops[2][kRounds];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < kRounds; ++k) {
      buf[r][k].resize(kCount);
      for (size_t i = 0; i < kCount; ++i) buf[r][k][i] = value(r, k, i);
      ops[r][k] = detail::make_round_allreduce(sig, buf[r][k].data(), boxes[r].get(), k, 1);
    }
  }
  for (int k = 0; k < kRounds; ++k) {
    ASSERT_TRUE(ops[0][k]->start(ctx[0]).ok());
    EXPECT_EQ(ops[0][k]->waits_for_room(), k >= static_cast<int>(SmallBoxes::kDepth))
        << "round " << k;
  }
  // Rank 0's stores woke rank 1 (its transport, where an idle engine sleeps).
  const auto t0 = std::chrono::steady_clock::now();
  t[1].wait(std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10))
      << "rank 0's stores did not wake rank 1";
  for (int k = 0; k < kRounds; ++k) ASSERT_TRUE(ops[1][k]->start(ctx[1]).ok());
  // Both ranks drive their rounds, in order, as their engines would.
  for (int pass = 0; pass < 1000; ++pass) {
    bool all = true;
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < kRounds; ++k) {
        if (ops[r][k]->finished()) continue;
        Result<int> step = ops[r][k]->advance(ctx[r]);
        ASSERT_TRUE(step.ok()) << "rank " << r << " round " << k << ": "
                               << step.status().to_string();
        all = all && ops[r][k]->finished();
      }
    }
    if (all) break;
  }
  for (int k = 0; k < kRounds; ++k) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(ops[r][k]->finished()) << "rank " << r << " round " << k;
      EXPECT_FALSE(ops[r][k]->waits_for_room());
    }
    EXPECT_EQ(buf[0][k], buf[1][k]) << "round " << k;
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(buf[0][k][i], value(0, k, i) + value(1, k, i)) << "round " << k;
    }
  }
}

}  // namespace
}  // namespace eagercomm::test
