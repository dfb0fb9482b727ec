// Every collective against a reference computed in f64 / i64, for many rank counts, element
// counts, types, operators, in place and out of place, and back to back, with ranks as threads
// (the cases themselves: collective_cases.h, which mp_collectives_test.cc runs as processes).
// Requests in flight, progress and destroy: collectives_lifecycle_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "tests/collectives/collective_cases.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {
namespace {

using cases::kLargeCount;
using cases::value;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
// 16 ranks on 2 cores took a quarter of the TSan stage and exercise no code path that 8 do not.
#define EAGERCOMM_TEST_RANK_COUNTS 1, 2, 3, 4, 5, 7, 8
#else
#define EAGERCOMM_TEST_RANK_COUNTS 1, 2, 3, 4, 5, 7, 8, 16
#endif

std::vector<size_t> counts_for(int P) {
  std::vector<size_t> c = {0, 1, static_cast<size_t>(P - 1), static_cast<size_t>(P + 1),
                           kLargeCount};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

class CollectivesBySize : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesBySize, AllreduceEveryTypeOpCountAndPlacement) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  ASSERT_EQ(w->size(), P);
  w->run_each(
      [&](Communicator& c) { cases::allreduce_every_type_op_and_placement(c, counts_for(P)); });
}

TEST_P(CollectivesBySize, BroadcastFromEveryRoot) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  w->run_each([&](Communicator& c) {
    cases::broadcast_from_roots(c, counts_for(P), kAllDataTypes, P > 4 ? P / 3 : 1);
  });
}

TEST_P(CollectivesBySize, AllgatherInPlaceAndOutOfPlace) {
  const int P = GetParam();
  auto w = World::make(P, test_config());
  std::vector<size_t> per_rank;
  for (size_t count : counts_for(P))
    per_rank.push_back(std::min<size_t>(count, kLargeCount / P + 1));
  constexpr bool kBothPlacements[] = {false, true};
  w->run_each([&](Communicator& c) {
    cases::allgather_blocks(c, per_rank, kAllDataTypes, kBothPlacements);
  });
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

TEST(Collectives, RealValuedAllreduceIsBitIdenticalOnEveryRank) {
  for (int P : {3, 4, 7}) {
    auto w = World::make(P, test_config());
    w->run_each([](Communicator& c) {
      cases::real_valued_allreduce_is_bit_identical(c, {size_t{5}, size_t{4099}, kLargeCount});
    });
    if (HasFailure()) return;
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
      w->run_each([&](Communicator& c) {
        cases::staged_path(
            c, {size_t{0}, size_t{1}, static_cast<size_t>(P + 1), size_t{3000}, size_t{70001}});
      });
      if (HasFailure()) {
        ADD_FAILURE() << "with overrides starting " << overrides[0].first << "="
                      << overrides[0].second << ", P=" << P;
        return;
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
