// Bad input: every case gives a clear Status on every rank, nothing hangs, nothing is
// corrupted, and the communicator keeps working for correct calls afterwards.
#include <gtest/gtest.h>

#include <chrono>

#include "runtime/store.h"
#include "tests/harness/thread_world.h"
#include "transport/registry.h"

namespace eagercomm::test {
namespace {

constexpr auto kNoHang = std::chrono::seconds(60);

// After a failed collective, a correct one still works on every rank.
void expect_still_usable(World& w) {
  w.run([&](int r, Communicator& c) {
    std::vector<int32_t> x(1000, r);
    ASSERT_TRUE(c.allreduce(x.data(), x.data(), x.size(), DataType::kInt32, ReduceOp::kSum).ok());
    const int P = c.size();
    EXPECT_EQ(x[999], P * (P - 1) / 2);
  });
}

struct Outcome {
  std::vector<Status> status;
  bool all_failed(StatusCode code) const {
    for (const auto& s : status) {
      if (s.code() != code) return false;
    }
    return true;
  }
};

// Runs fn on every rank; fn returns the request's final status (waiting at most kNoHang).
Outcome run_all(World& w, const std::function<Status(int, Communicator&)>& fn) {
  Outcome o;
  o.status.resize(w.size());
  w.run([&](int r, Communicator& c) { o.status[r] = fn(r, c); });
  return o;
}

Status finish(Result<Request> req) {
  if (!req.ok()) return req.status();
  return req.value().wait(kNoHang);
}

TEST(BadInput, NullBufferWithNonZeroCountFailsOnEveryRank) {
  for (int P : {2, 3, 5}) {
    auto w = World::make(P, test_config());
    Outcome o = run_all(*w, [&](int r, Communicator& c) {
      std::vector<float> buf(64, 1.0f);
      float* p = r == 1 ? nullptr : buf.data();
      Status s = finish(c.allreduce_async(p, p, buf.size(), DataType::kFloat32, ReduceOp::kSum));
      if (r != 1) {
        EXPECT_EQ(buf[0], 1.0f) << "rank " << r << "'s buffer was written";
      }
      return s;
    });
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(o.status[r].code(), StatusCode::kInvalidArgument) << o.status[r].to_string();
      EXPECT_NE(o.status[r].message().find("null buffer"), std::string::npos)
          << o.status[r].message();
      EXPECT_NE(o.status[r].message().find("rank 1"), std::string::npos) << o.status[r].message();
    }
    expect_still_usable(*w);
  }
}

TEST(BadInput, CountThatDiffersBetweenRanksIsDetectedEverywhere) {
  // Small and large counts, so both recursive doubling and ring see the mismatch, and a count
  // that makes one rank choose the other algorithm.
  for (int P : {2, 3, 4, 7}) {
    // 10: small boxes; 100000: ring; 4096: one rank crosses to ring; 300000: direct; the
    // largest small-box count: one rank crosses to recursive doubling.
    const size_t small = test_config().small_max_bytes / sizeof(float);
    for (size_t base : {size_t{10}, size_t{100000}, size_t{4096}, size_t{300000}, small}) {
      auto w = World::make(P, test_config());
      std::vector<std::vector<float>> bufs(P, std::vector<float>(base + 1, 7.0f));
      Outcome o = run_all(*w, [&](int r, Communicator& c) {
        const size_t count = r == P - 1 ? base + 1 : base;
        return finish(c.allreduce_async(bufs[r].data(), bufs[r].data(), count, DataType::kFloat32,
                                        ReduceOp::kSum));
      });
      EXPECT_TRUE(o.all_failed(StatusCode::kMismatch))
          << "P=" << P << " count=" << base << ": " << o.status[0].to_string();
      const std::string& msg = o.status[0].message();
      EXPECT_NE(msg.find("count="), std::string::npos) << msg;
      for (int r = 0; r < P; ++r) {
        for (float x : bufs[r]) {
          // Untouched, or the sum over all ranks; never a partial or mixed value.
          ASSERT_TRUE(x == 7.0f || x == 7.0f * P) << "rank " << r << " holds " << x;
        }
      }
      expect_still_usable(*w);
    }
  }
}

TEST(BadInput, TypeOrOperatorThatDiffersIsDetected) {
  const int P = 4;
  auto w = World::make(P, test_config());
  Outcome types = run_all(*w, [&](int r, Communicator& c) {
    std::vector<int64_t> buf(100, 1);
    const DataType t = r == 2 ? DataType::kFloat64 : DataType::kInt64;
    return finish(c.allreduce_async(buf.data(), buf.data(), buf.size(), t, ReduceOp::kSum));
  });
  EXPECT_TRUE(types.all_failed(StatusCode::kMismatch)) << types.status[0].to_string();
  EXPECT_NE(types.status[0].message().find("f64"), std::string::npos);
  Outcome ops = run_all(*w, [&](int r, Communicator& c) {
    std::vector<int64_t> buf(100000, 1);
    const ReduceOp op = r == 0 ? ReduceOp::kMax : ReduceOp::kSum;
    return finish(c.allreduce_async(buf.data(), buf.data(), buf.size(), DataType::kInt64, op));
  });
  EXPECT_TRUE(ops.all_failed(StatusCode::kMismatch)) << ops.status[1].to_string();
  EXPECT_NE(ops.status[1].message().find("max"), std::string::npos) << ops.status[1].message();
  expect_still_usable(*w);
}

TEST(BadInput, BroadcastRootOrCountThatDiffersFailsOnEveryRank) {
  for (int P : {2, 3, 6}) {
    auto w = World::make(P, test_config());
    Outcome roots = run_all(*w, [&](int r, Communicator& c) {
      std::vector<float> buf(1000, static_cast<float>(r));
      return finish(c.broadcast_async(buf.data(), buf.size(), DataType::kFloat32, r == 1 ? 1 : 0));
    });
    EXPECT_TRUE(roots.all_failed(StatusCode::kMismatch)) << roots.status[0].to_string();
    Outcome counts = run_all(*w, [&](int r, Communicator& c) {
      std::vector<float> buf(1001, 1.0f);
      return finish(c.broadcast_async(buf.data(), r == P - 1 ? 1001 : 1000, DataType::kFloat32, 0));
    });
    EXPECT_TRUE(counts.all_failed(StatusCode::kMismatch)) << counts.status[0].to_string();
    Outcome bad_root = run_all(*w, [&](int r, Communicator& c) {
      std::vector<float> buf(10, 1.0f);
      return finish(c.broadcast_async(buf.data(), buf.size(), DataType::kFloat32, r == 0 ? P : 0));
    });
    EXPECT_EQ(bad_root.status[0].code(), StatusCode::kInvalidArgument);
    for (int r = 1; r < P; ++r) EXPECT_FALSE(bad_root.status[r].ok());
    expect_still_usable(*w);
  }
}

TEST(BadInput, DifferentCollectivesAtTheSamePositionAreDetected) {
  const int P = 3;
  auto w = World::make(P, test_config());
  Outcome o = run_all(*w, [&](int r, Communicator& c) {
    std::vector<float> buf(30, 1.0f);
    if (r == 0) return finish(c.barrier_async());
    if (r == 1) return finish(c.broadcast_async(buf.data(), 10, DataType::kFloat32, 0));
    return finish(
        c.allreduce_async(buf.data(), buf.data(), 10, DataType::kFloat32, ReduceOp::kSum));
  });
  for (const auto& s : o.status) EXPECT_FALSE(s.ok());
  EXPECT_NE(o.status[2].message().find("called"), std::string::npos) << o.status[2].message();
  expect_still_usable(*w);
}

TEST(BadInput, AlgorithmSettingsThatDifferAreDetected) {
  // Configurations are per rank; ranks that would run different protocols must not.
  const int P = 2;
  HashStore store;
  Config ring = test_config({{"EAGERCOMM_ALLREDUCE_ALGO", "ring"}});
  Config rd = test_config({{"EAGERCOMM_ALLREDUCE_ALGO", "rd"}});
  std::vector<std::unique_ptr<Communicator>> comms(P);
  run_threads(P, [&](int r) {
    CommunicatorOptions o;
    o.config = r == 0 ? &ring : &rd;
    o.scope = "algo-mismatch";
    auto c = Communicator::create(store, r, P, o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    comms[r] = std::move(c).value();
  });
  std::vector<Status> st(P);
  run_threads(P, [&](int r) {
    float x = 1;
    st[r] = finish(comms[r]->allreduce_async(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum));
  });
  for (const auto& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.to_string();
    EXPECT_NE(s.message().find("algorithm"), std::string::npos) << s.message();
  }
}

TEST(BadInput, PartiallyOverlappingBuffersAreRejected) {
  auto w = World::make(2, test_config());
  Outcome o = run_all(*w, [&](int r, Communicator& c) {
    std::vector<float> buf(200, 1.0f);
    float* recv = r == 0 ? buf.data() + 10 : buf.data() + 100;
    return finish(c.allreduce_async(buf.data(), recv, 100, DataType::kFloat32, ReduceOp::kSum));
  });
  EXPECT_EQ(o.status[0].code(), StatusCode::kInvalidArgument) << o.status[0].to_string();
  EXPECT_NE(o.status[0].message().find("overlap"), std::string::npos);
  EXPECT_FALSE(o.status[1].ok());
  expect_still_usable(*w);
}

TEST(BadInput, OutOfRangeTypeOrOperatorValues) {
  auto w = World::make(2, test_config());
  Outcome o = run_all(*w, [&](int r, Communicator& c) {
    float x = 1;
    const auto type = r == 0 ? static_cast<DataType>(42) : DataType::kFloat32;
    return finish(c.allreduce_async(&x, &x, 1, type, ReduceOp::kSum));
  });
  EXPECT_EQ(o.status[0].code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(o.status[1].ok());
  Outcome o2 = run_all(*w, [&](int, Communicator& c) {
    float x = 1;
    return finish(c.allreduce_async(&x, &x, 1, DataType::kFloat32, static_cast<ReduceOp>(9)));
  });
  EXPECT_TRUE(o2.all_failed(StatusCode::kInvalidArgument)) << o2.status[0].to_string();
  expect_still_usable(*w);
}

TEST(BadInput, UnknownOrUnavailableTransportNames) {
  Config config = test_config();
  HashStore store;
  TransportParams params{0, 1, &config, &store, "t"};
  auto unknown = create_transport("tcp", params);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("inproc"), std::string::npos)
      << "the error should list the known names: " << unknown.status().message();
  auto absent = create_transport("verbs", params);
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(create_transport("inproc", params).ok());

  // Through the configuration: the variable rejects unknown names...
  Status bad = config.set("EAGERCOMM_TRANSPORT", "tcp");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("EAGERCOMM_TRANSPORT"), std::string::npos);
  EXPECT_NE(bad.message().find("auto|inproc|shm|ucx|verbs"), std::string::npos);
  // ...and a known but absent backend fails communicator creation clearly.
  Config verbs = test_config({{"EAGERCOMM_TRANSPORT", "verbs"}});
  CommunicatorOptions opts;
  opts.config = &verbs;
  auto world = make_inproc_world(2, opts);
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(world.status().message().find("verbs"), std::string::npos);
}

TEST(BadInput, InvalidConfigValuesNameTheVariableAndTheAcceptedValues) {
  auto r = Config::load({{"EAGERCOMM_SLOTS", "1"},
                         {"EAGERCOMM_SPIN", "fast"},
                         {"EAGERCOMM_PROGRESS_THREAD", "maybe"}});
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("EAGERCOMM_SLOTS"), std::string::npos) << m;
  EXPECT_NE(m.find("EAGERCOMM_SPIN"), std::string::npos) << m;
  EXPECT_NE(m.find("EAGERCOMM_PROGRESS_THREAD"), std::string::npos) << m;
  EXPECT_NE(m.find("auto|on|off"), std::string::npos) << m;
}

TEST(BadInput, WorldSizesThatDifferBetweenRanksAreDetected) {
  HashStore store;
  Config config = test_config({{"EAGERCOMM_TIMEOUT", "5s"}});
  CommunicatorOptions opts;
  opts.config = &config;
  opts.scope = "sizes";
  Result<std::unique_ptr<Communicator>> a = Status(StatusCode::kInternal, "unset");
  Result<std::unique_ptr<Communicator>> b = Status(StatusCode::kInternal, "unset");
  std::thread t0([&] { a = Communicator::create(store, 0, 2, opts); });
  std::thread t1([&] { b = Communicator::create(store, 1, 3, opts); });
  t0.join();
  t1.join();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kMismatch) << b.status().to_string();
  EXPECT_NE(b.status().message().find("world size"), std::string::npos);
  ASSERT_FALSE(a.ok());
  // Rank 0 sees rank 1's announcement (its world includes rank 1) and names the difference.
  EXPECT_EQ(a.status().code(), StatusCode::kMismatch) << a.status().to_string();
  EXPECT_NE(a.status().message().find("rank 1 was started with world size 3"), std::string::npos)
      << a.status().message();
}

TEST(BadInput, APeerThatNeverJoinsTimesOutNamingIt) {
  HashStore store;
  Config config = test_config({{"EAGERCOMM_TIMEOUT", "200ms"}});
  CommunicatorOptions opts;
  opts.config = &config;
  opts.scope = "lonely";
  auto c = Communicator::create(store, 0, 3, opts);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find("1, 2"), std::string::npos) << c.status().message();
}

TEST(BadInput, RanksOutOfRange) {
  HashStore store;
  Config config = test_config();
  CommunicatorOptions opts;
  opts.config = &config;
  EXPECT_EQ(Communicator::create(store, 3, 3, opts).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Communicator::create(store, -1, 3, opts).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_inproc_world(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eagercomm::test
