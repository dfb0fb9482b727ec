// Collectives as requests: several in flight at once, test() polling, the progress thread
// driving while the application computes, destroy while idle, in flight and during a direct
// allreduce, the shutdown order, and a timeout that leaves the request usable. (The results of
// every collective: collectives_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

TEST(Collectives, SeveralInFlightAtOnceCompleteIndependently) {
  const int P = 5;
  auto w =
      World::make(P, test_config({{"EAGERCOMM_SLOT_BYTES", "8KiB"}, {"EAGERCOMM_SLOTS", "4"}}));
  std::atomic<int> failures{0};
  w->run([&](int r, Communicator& c) {
    constexpr int kOps = 12;
    std::vector<std::vector<int64_t>> bufs(kOps);
    std::vector<Request> reqs;
    for (int k = 0; k < kOps; ++k) {
      const size_t count = k % 2 ? 20000 + k : 3 + k;
      bufs[k].resize(k % 4 == 3 ? count * P : count);
      Result<Request> req = Status(StatusCode::kInternal, "unset");
      if (k % 4 == 3) {
        for (size_t i = 0; i < count; ++i) bufs[k][r * count + i] = r * 1000 + k;
        req =
            c.allgather_async(bufs[k].data() + r * count, bufs[k].data(), count, DataType::kInt64);
      } else if (k % 4 == 2) {
        for (auto& x : bufs[k]) x = r == k % P ? k * 7 : -1;
        req = c.broadcast_async(bufs[k].data(), count, DataType::kInt64, k % P);
      } else {
        for (auto& x : bufs[k]) x = r + k;
        req = c.allreduce_async(bufs[k].data(), bufs[k].data(), count, DataType::kInt64,
                                ReduceOp::kSum);
      }
      if (!req.ok()) {
        failures++;
        return;
      }
      reqs.push_back(req.value());
    }
    Result<Request> bar = c.barrier_async();
    if (!bar.ok()) {
      failures++;
      return;
    }
    reqs.push_back(bar.value());
    // Wait in reverse order of submission.
    for (int k = static_cast<int>(reqs.size()) - 1; k >= 0; --k) {
      if (!reqs[k].wait().ok()) failures++;
    }
    for (int k = 0; k < kOps; ++k) {
      const size_t count = k % 2 ? 20000 + k : 3 + k;
      for (size_t i = 0; i < bufs[k].size(); ++i) {
        int64_t expect;
        if (k % 4 == 3)
          expect = static_cast<int64_t>(i / count) * 1000 + k;
        else if (k % 4 == 2)
          expect = k * 7;
        else
          expect = static_cast<int64_t>(P) * k + P * (P - 1) / 2;
        if (bufs[k][i] != expect) {
          failures++;
          break;
        }
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(Collectives, TestPollsUntilDone) {
  auto w = World::make(3, test_config());
  w->run([&](int r, Communicator& c) {
    std::vector<float> buf(50000, static_cast<float>(r));
    Result<Request> req =
        c.allreduce_async(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(req.ok());
    Status s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((s = req.value().test()).code() == StatusCode::kInProgress &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(buf[123], 3.0f);
  });
}

TEST(Collectives, ProgressThreadDrivesWhileTheApplicationComputes) {
  auto w = World::make(4, test_config({{"EAGERCOMM_PROGRESS_THREAD", "on"}}));
  w->run([&](int r, Communicator& c) {
    std::vector<float> buf(300000, 1.0f + r);
    Result<Request> req =
        c.allreduce_async(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(req.ok());
    // Never call test() or wait() until the operation is done: only the progress threads
    // can finish it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!req.value().ready() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(req.value().wait().ok());
    EXPECT_EQ(buf[0], 10.0f);
    // Inline waits still work with the thread present (the token is handed over).
    for (int i = 0; i < 200; ++i) {
      float x = 1.0f;
      ASSERT_TRUE(c.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).ok());
      ASSERT_EQ(x, 4.0f);
    }
  });
}

TEST(Collectives, DestroyWhileIdleIsClean) {
  for (int P : {1, 2, 5}) {
    auto w = World::make(P, test_config());
    w->run([](int, Communicator& c) { ASSERT_TRUE(c.barrier().ok()); });
    w->run([](int, Communicator& c) { c.destroy(); });
    w->run([](int, Communicator& c) {
      float x = 0;
      EXPECT_EQ(c.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).code(),
                StatusCode::kAborted);
    });
  }
}

TEST(Collectives, DestroyWhileInFlightFailsEveryoneCleanly) {
  const int P = 4;
  auto w = World::make(P, test_config());
  std::vector<Status> st(P);
  std::vector<float> buf(P * 100000, 1.0f);
  w->run([&](int r, Communicator& c) {
    float* mine = buf.data() + r * 100000;
    if (r == P - 1) {
      // Never calls the collective: destroys its communicator while the others are in it.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      c.destroy();
      return;
    }
    Result<Request> req = c.allreduce_async(mine, mine, 100000, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(req.ok());
    st[r] = req.value().wait(std::chrono::seconds(60));
  });
  for (int r = 0; r < P - 1; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kPeerFailed) << st[r].to_string();
    EXPECT_NE(st[r].message().find("rank 3"), std::string::npos) << st[r].message();
  }
  // A later collective fails at once instead of hanging.
  w->run([&](int r, Communicator& c) {
    if (r == P - 1) return;
    float x = 1;
    EXPECT_EQ(c.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).code(),
              StatusCode::kPeerFailed);
  });
}

// Issue 21: a leaver's exit reaches every rank without connecting it to all of them: directly
// to the peers it exchanged messages with (none here: nothing ran), down a tree of partners
// (r + 2^i from the leaver) to the rest. Every rank, idle in its progress thread, learns it.
TEST(Collectives, ALeaversExitReachesRanksItNeverTalkedTo) {
  const int P = 16, leaver = 5;
  auto w = World::make(P, test_config({{"EAGERCOMM_PROGRESS_THREAD", "on"}}));
  std::vector<uint32_t> gone(P, 0), connections(P, 0);
  w->run([&](int r, Communicator& c) {
    if (r == leaver) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      c.destroy();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (c.stats().peers_gone == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    gone[r] = c.stats().peers_gone;
    connections[r] = c.stats().connected_peers;
  });
  for (int r = 0; r < P; ++r) {
    if (r == leaver) continue;
    EXPECT_EQ(gone[r], 1u) << "rank " << r << " never heard that rank " << leaver << " left";
    // The tree's edges only: a parent and up to log2 P children, never all 15.
    EXPECT_LE(connections[r], 5u) << "rank " << r;
  }
  // The next collective fails at once on every rank, naming the leaver.
  w->run([&](int r, Communicator& c) {
    if (r == leaver) return;
    float x = 1;
    Status s = c.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << s.to_string();
    EXPECT_NE(s.message().find("rank 5 destroyed its communicator"), std::string::npos)
        << s.message();
  });
}

TEST(Collectives, DestroyWithOwnRequestPendingAbortsIt) {
  auto w = World::make(2, test_config());
  std::vector<float> buf(1000, 1.0f);
  Result<Request> req = (*w)[0].allreduce_async(buf.data(), buf.data(), buf.size(),
                                                DataType::kFloat32, ReduceOp::kSum);
  ASSERT_TRUE(req.ok());
  (*w)[0].destroy();
  EXPECT_EQ(req.value().wait(std::chrono::seconds(10)).code(), StatusCode::kAborted);
  float x = 1;
  EXPECT_EQ((*w)[1].allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kPeerFailed);
}

TEST(Collectives, DestroyDuringADirectAllreduceLetsTheCallerFreeItsBuffer) {
  // Peers of a direct allreduce store into this rank's buffer. Once destroy() returns, the
  // caller frees it; no peer may write there afterwards (the ASan build checks).
  for (int round = 0; round < 6; ++round) {
    const int P = 3;
    const size_t count = 4 << 20;  // peers take a while to store 16 MiB: destroy lands mid-way
    auto w = World::make(P, test_config({{"EAGERCOMM_ALLREDUCE_ALGO", "direct"}}));
    std::vector<Status> st(P);
    w->run([&](int r, Communicator& c) {
      if (r == 0) {
        auto buf = std::make_unique<std::vector<float>>(count, 1.0f);
        Result<Request> req =
            c.allreduce_async(buf->data(), buf->data(), count, DataType::kFloat32, ReduceOp::kSum);
        ASSERT_TRUE(req.ok());
        for (int i = 0; i < round; ++i) (void)req.value().test();  // send the keys, maybe
        c.destroy();
        buf.reset();  // freed: peers must be done with it
        st[r] = req.value().wait(std::chrono::seconds(30));
        return;
      }
      std::vector<float> buf(count, 1.0f);
      st[r] = c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    });
    // Rank 0 either finished before destroying, or was aborted; the others either finished or
    // learned that rank 0 left. Nobody hangs, and nothing touched freed memory.
    EXPECT_TRUE(st[0].ok() || st[0].code() == StatusCode::kAborted) << st[0].to_string();
    for (int r = 1; r < P; ++r) {
      EXPECT_TRUE(st[r].ok() || st[r].code() == StatusCode::kPeerFailed) << st[r].to_string();
    }
  }
}

TEST(Collectives, NormalShutdownOrderDoesNotFailSlowerRanks) {
  // Rank 0 finishes its last collective and destroys at once; the others are still finishing
  // theirs and must succeed.
  for (int round = 0; round < 20; ++round) {
    const int P = 3;
    auto w = World::make(P, test_config());
    std::vector<Status> st(P);
    w->run([&](int r, Communicator& c) {
      std::vector<float> buf(200000, 1.0f);
      if (r != 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * r));
      st[r] = c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      if (r == 0) c.destroy();
    });
    for (int r = 0; r < P; ++r)
      ASSERT_TRUE(st[r].ok()) << "round " << round << " rank " << r << ": " << st[r].to_string();
  }
}

TEST(Collectives, TimeoutWhenAPeerNeverCallsLeavesTheRequestUsable) {
  auto w = World::make(2, test_config());
  float a = 1, b = 2;
  Result<Request> req = (*w)[0].allreduce_async(&a, &a, 1, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_TRUE(req.ok());
  Status s = req.value().wait(std::chrono::milliseconds(50));
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_NE(s.message().find("allreduce"), std::string::npos) << s.message();
  std::thread other(
      [&] { EXPECT_TRUE((*w)[1].allreduce(&b, &b, 1, DataType::kFloat32, ReduceOp::kSum).ok()); });
  EXPECT_TRUE(req.value().wait(std::chrono::seconds(60)).ok());
  other.join();
  EXPECT_EQ(a, 3.0f);
  EXPECT_EQ(b, 3.0f);
}

}  // namespace
}  // namespace eagercomm::test
