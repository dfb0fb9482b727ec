// Every collective against a reference computed in f64 / i64, for many rank counts, element
// counts, types, operators, in place and out of place, and back to back. Requests in flight,
// progress and destroy: collectives_lifecycle_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "tests/typed_buffer.h"
#include "tests/world_harness.h"

namespace eagercomm::test {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr size_t kLargeCount = (64 << 10) + 3;  // sanitizers: keep the run short
// 16 ranks on 2 cores took a quarter of the TSan stage and exercise no code path that 8 do not.
#define EAGERCOMM_TEST_RANK_COUNTS 1, 2, 3, 4, 5, 7, 8
#else
constexpr size_t kLargeCount = (1 << 20) + 3;
#define EAGERCOMM_TEST_RANK_COUNTS 1, 2, 3, 4, 5, 7, 8, 16
#endif

// Small integers: every sum over up to 16 ranks is exact in every type, bf16 included.
double value(int rank, size_t i, uint64_t salt) {
  return static_cast<double>(static_cast<int64_t>((i * 7 + rank * 13 + salt * 5) % 17) - 8);
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return 0;
}

std::vector<size_t> counts_for(int P) {
  std::vector<size_t> c = {0, 1, static_cast<size_t>(P - 1), static_cast<size_t>(P + 1),
                           kLargeCount};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// Runs one allreduce on every rank and checks every element of every rank's output.
void check_allreduce(World& w, size_t count, DataType type, ReduceOp op, bool in_place,
                     uint64_t salt) {
  const int P = w.size();
  std::vector<TypedBuffer> in(P), out(P);
  for (int r = 0; r < P; ++r) {
    in[r] = TypedBuffer(type, count);
    out[r] = TypedBuffer(type, count);
    for (size_t i = 0; i < count; ++i) {
      in[r].set(i, value(r, i, salt));
      out[r].set(i, -99);  // poison: an element not written shows up
    }
  }
  std::vector<Status> status(P);
  w.run([&](int r, Communicator& c) {
    if (in_place) {
      status[r] = c.allreduce(in[r].data(), in[r].data(), count, type, op);
    } else {
      status[r] = c.allreduce(in[r].data(), out[r].data(), count, type, op);
    }
  });
  for (int r = 0; r < P; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].to_string();
  }
  for (size_t i = 0; i < count; ++i) {
    double expect = value(0, i, salt);
    for (int r = 1; r < P; ++r) expect = combine(op, expect, value(r, i, salt));
    for (int r = 0; r < P; ++r) {
      const double got = in_place ? in[r].get(i) : out[r].get(i);
      if (got != expect) {
        FAIL() << "P=" << P << " count=" << count << " " << dtype_name(type) << " "
               << reduce_op_name(op) << (in_place ? " in-place" : " out-of-place") << ": rank " << r
               << " element " << i << " = " << got << ", expected " << expect;
      }
      if (!in_place && in[r].get(i) != value(r, i, salt)) {
        FAIL() << "rank " << r << " input element " << i << " was modified";
      }
    }
  }
}

class CollectivesBySize : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesBySize, AllreduceEveryTypeOpCountAndPlacement) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  ASSERT_EQ(w->size(), P);
  uint64_t salt = 0;
  for (size_t count : counts_for(P)) {
    for (DataType type : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        for (bool in_place : {false, true}) {
          check_allreduce(*w, count, type, op, in_place, ++salt);
          if (HasFatalFailure() || HasFailure()) return;
        }
      }
    }
  }
}

TEST_P(CollectivesBySize, BroadcastFromEveryRoot) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  for (size_t count : counts_for(P)) {
    for (DataType type : kAllDataTypes) {
      for (int root = 0; root < P; root += (P > 4 ? P / 3 : 1)) {
        std::vector<TypedBuffer> buf(P);
        for (int r = 0; r < P; ++r) {
          buf[r] = TypedBuffer(type, count);
          for (size_t i = 0; i < count; ++i) buf[r].set(i, r == root ? value(root, i, 3) : -99);
        }
        std::vector<Status> st(P);
        w->run(
            [&](int r, Communicator& c) { st[r] = c.broadcast(buf[r].data(), count, type, root); });
        for (int r = 0; r < P; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r].to_string();
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(buf[r].get(i), value(root, i, 3))
                << "P=" << P << " root=" << root << " rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST_P(CollectivesBySize, AllgatherInPlaceAndOutOfPlace) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  for (size_t count : counts_for(P)) {
    const size_t per_rank = std::min<size_t>(count, kLargeCount / P + 1);
    for (DataType type : kAllDataTypes) {
      for (bool in_place : {false, true}) {
        std::vector<TypedBuffer> in(P), out(P);
        for (int r = 0; r < P; ++r) {
          in[r] = TypedBuffer(type, per_rank);
          out[r] = TypedBuffer(type, per_rank * P);
          for (size_t i = 0; i < per_rank * P; ++i) out[r].set(i, -99);
          for (size_t i = 0; i < per_rank; ++i) {
            in[r].set(i, value(r, i, 11));
            if (in_place) out[r].set(r * per_rank + i, value(r, i, 11));
          }
        }
        std::vector<Status> st(P);
        w->run([&](int r, Communicator& c) {
          const uint8_t* send = in_place ? static_cast<const uint8_t*>(out[r].data()) +
                                               r * per_rank * dtype_size(type)
                                         : static_cast<const uint8_t*>(in[r].data());
          st[r] = c.allgather(send, out[r].data(), per_rank, type);
        });
        for (int r = 0; r < P; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r].to_string();
          for (int g = 0; g < P; ++g) {
            for (size_t i = 0; i < per_rank; ++i) {
              ASSERT_EQ(out[r].get(g * per_rank + i), value(g, i, 11))
                  << "P=" << P << " rank " << r << " block " << g << " element " << i;
            }
          }
        }
      }
    }
  }
}

TEST_P(CollectivesBySize, BarrierHoldsEveryoneBack) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  std::atomic<int> arrived{0};
  std::atomic<bool> early{false};
  for (int round = 0; round < 20; ++round) {
    arrived = 0;
    w->run([&](int r, Communicator& c) {
      if (r == round % P) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      arrived.fetch_add(1);
      ASSERT_TRUE(c.barrier().ok());
      if (arrived.load() != P) early = true;
    });
  }
  EXPECT_FALSE(early.load()) << "a rank left a barrier before every rank had entered it";
}

INSTANTIATE_TEST_SUITE_P(P, CollectivesBySize, ::testing::Values(EAGERCOMM_TEST_RANK_COUNTS),
                         [](const auto& info) { return "P" + std::to_string(info.param); });

// Real-valued data: the result matches the f64 reference within rounding, and every rank holds
// the same bits (the property partial collectives build on).
TEST(Collectives, RealValuedAllreduceIsBitIdenticalOnEveryRank) {
  for (int P : {3, 4, 7}) {
    for (size_t count : {size_t{5}, size_t{4099}, kLargeCount}) {
      auto w = World::make(P, test_config());
      std::vector<std::vector<float>> buf(P, std::vector<float>(count));
      std::mt19937 rng(P * 31 + count);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (auto& b : buf)
        for (auto& x : b) x = dist(rng);
      std::vector<double> ref(count, 0.0);
      for (auto& b : buf)
        for (size_t i = 0; i < count; ++i) ref[i] += b[i];
      w->run([&](int r, Communicator& c) {
        ASSERT_TRUE(
            c.allreduce(buf[r].data(), buf[r].data(), count, DataType::kFloat32, ReduceOp::kSum)
                .ok());
      });
      for (int r = 1; r < P; ++r) {
        ASSERT_EQ(0, std::memcmp(buf[0].data(), buf[r].data(), count * sizeof(float)))
            << "rank " << r << " differs from rank 0 (P=" << P << ", count=" << count << ")";
      }
      for (size_t i = 0; i < count; ++i) ASSERT_NEAR(buf[0][i], ref[i], 1e-5 * P);
    }
  }
}

// The staged path (what UCX and verbs use: fill a local slot, then write), tiny slots (many
// chunks, few credits, spills under pressure), and forced algorithms.
TEST(Collectives, StagedPathTinySlotsAndForcedAlgorithms) {
  const std::vector<std::vector<std::pair<std::string, std::string>>> configs = {
      {{"EAGERCOMM_DIRECT", "0"}},
      {{"EAGERCOMM_SLOT_BYTES", "4KiB"}, {"EAGERCOMM_SLOTS", "2"}},
      {{"EAGERCOMM_DIRECT", "0"}, {"EAGERCOMM_SLOT_BYTES", "4KiB"}, {"EAGERCOMM_SLOTS", "3"}},
      {{"EAGERCOMM_ALLREDUCE_ALGO", "ring"}, {"EAGERCOMM_BCAST_ALGO", "chain"}},
      {{"EAGERCOMM_ALLREDUCE_ALGO", "rd"}, {"EAGERCOMM_BCAST_ALGO", "tree"}},
      {{"EAGERCOMM_ALLREDUCE_ALGO", "direct"}},
      {{"EAGERCOMM_ALLREDUCE_ALGO", "direct"}, {"EAGERCOMM_DIRECT", "0"}},  // falls back to ring
  };
  for (const auto& overrides : configs) {
    for (int P : {2, 3, 5, 8}) {
      auto w = World::make(P, test_config(overrides));
      for (size_t count :
           {size_t{0}, size_t{1}, static_cast<size_t>(P + 1), size_t{3000}, size_t{70001}}) {
        check_allreduce(*w, count, DataType::kFloat32, ReduceOp::kSum, false, count);
        check_allreduce(*w, count, DataType::kInt64, ReduceOp::kMax, true, count + 1);
        if (HasFailure()) {
          ADD_FAILURE() << "with overrides starting " << overrides[0].first << "="
                        << overrides[0].second;
          return;
        }
        std::vector<TypedBuffer> buf(P);
        for (int r = 0; r < P; ++r) {
          buf[r] = TypedBuffer(DataType::kInt32, count);
          for (size_t i = 0; i < count; ++i) buf[r].set(i, r == P - 1 ? value(9, i, 0) : 0);
        }
        w->run([&](int r, Communicator& c) {
          ASSERT_TRUE(c.broadcast(buf[r].data(), count, DataType::kInt32, P - 1).ok());
        });
        for (int r = 0; r < P; ++r) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r].get(i), value(9, i, 0));
        }
      }
    }
  }
}

// Direct allreduce above the streaming-store threshold, in place and out of place, with ranks
// that mix the two (each destination decides for itself how it is stored to).
TEST(Collectives, DirectAllreduceLargeMixedPlacement) {
  const int P = 3;
  const size_t count = (5 << 20) / 2 + 7;  // 10 MiB of f32
  auto w = World::make(P, test_config({{"EAGERCOMM_ALLREDUCE_ALGO", "direct"}}));
  std::vector<std::vector<float>> in(P, std::vector<float>(count)),
      out(P, std::vector<float>(count));
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < P; ++r) {
      for (size_t i = 0; i < count; ++i) in[r][i] = static_cast<float>(value(r, i, round));
      std::fill(out[r].begin(), out[r].end(), -99.0f);
    }
    w->run([&](int r, Communicator& c) {
      const bool in_place = (r + round) % 2 == 0;
      float* dst = in_place ? in[r].data() : out[r].data();
      ASSERT_TRUE(c.allreduce(in[r].data(), dst, count, DataType::kFloat32, ReduceOp::kSum).ok());
    });
    for (int r = 0; r < P; ++r) {
      const bool in_place = (r + round) % 2 == 0;
      const std::vector<float>& got = in_place ? in[r] : out[r];
      for (size_t i = 0; i < count; ++i) {
        double expect = 0;
        for (int q = 0; q < P; ++q) expect += value(q, i, round);
        ASSERT_EQ(got[i], static_cast<float>(expect)) << "rank " << r << " element " << i;
      }
    }
  }
}

TEST(Collectives, ThousandBackToBackCollectivesWithDistinctData) {
  const int P = 4;
  auto w = World::make(P, test_config());
  std::atomic<int> wrong{0};
  w->run([&](int r, Communicator& c) {
    std::vector<int32_t> buf;
    for (int it = 0; it < 1000; ++it) {
      const size_t count = (it % 3 == 0) ? 3 : (it % 3 == 1 ? 1000 : 100003);
      buf.assign(count, 0);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(it * 10 + r + i % 5);
      if (!c.allreduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum).ok()) {
        wrong.fetch_add(1);
        return;
      }
      for (size_t i = 0; i < count; ++i) {
        const int32_t expect = static_cast<int32_t>(P * (it * 10 + i % 5) + P * (P - 1) / 2);
        if (buf[i] != expect) {
          wrong.fetch_add(1);
          break;
        }
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace eagercomm::test
