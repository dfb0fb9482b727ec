// The collective checks, written once for one rank's communicator: collectives_test.cc runs them
// with ranks as threads of one process (World::run_each, tests/harness/thread_world.h),
// mp_collectives_test.cc with ranks as processes under the launcher. Inputs are a function of
// (rank, element, salt), so every rank knows its peers' inputs and checks its own output against
// an f64 reference; what must agree across ranks (the bits of a real-valued sum) is gathered and
// compared on every rank. A case returns at its first failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "collectives/communicator.h"
#include "tests/collectives/typed_buffer.h"

namespace eagercomm::test::cases {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr size_t kLargeCount = (64 << 10) + 3;  // sanitizers: keep the run short
#else
inline constexpr size_t kLargeCount = (1 << 20) + 3;
#endif

// Small integers: every sum over up to 16 ranks is exact in every type, bf16 included.
inline double value(int rank, size_t i, uint64_t salt) {
  return static_cast<double>(static_cast<int64_t>((i * 7 + rank * 13 + salt * 5) % 17) - 8);
}

inline double combine(ReduceOp op, double a, double b) {
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

// One allreduce: every element of this rank's output against the reference (the output is
// poisoned first, so an element not written shows up), and the input untouched out of place.
inline void allreduce_once(Communicator& c, size_t count, DataType type, ReduceOp op, bool in_place,
                           uint64_t salt) {
  const int P = c.size(), r = c.rank();
  TypedBuffer in(type, count), out(type, count);
  for (size_t i = 0; i < count; ++i) {
    in.set(i, value(r, i, salt));
    out.set(i, -99);
  }
  const Status s = c.allreduce(in.data(), in_place ? in.data() : out.data(), count, type, op);
  ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.to_string();
  const TypedBuffer& got = in_place ? in : out;
  // value(q, i, salt) depends on i only through (i * 7 + salt * 5) % 17: the reference of
  // element i is one of 17, computed once (a rank checking its own output stays O(count)).
  double reference[17];
  const auto value_at = [](int q, size_t base) {
    return static_cast<double>(static_cast<int64_t>((base + q * 13) % 17) - 8);
  };
  for (size_t base = 0; base < 17; ++base) {
    reference[base] = value_at(0, base);
    for (int q = 1; q < P; ++q) reference[base] = combine(op, reference[base], value_at(q, base));
  }
  for (size_t i = 0; i < count; ++i) {
    const double expect = reference[(i * 7 + salt * 5) % 17];
    if (got.get(i) != expect) {
      FAIL() << "P=" << P << " count=" << count << " " << dtype_name(type) << " "
             << reduce_op_name(op) << (in_place ? " in-place" : " out-of-place") << ": rank " << r
             << " element " << i << " = " << got.get(i) << ", expected " << expect;
    }
    if (!in_place && in.get(i) != value(r, i, salt)) {
      FAIL() << "rank " << r << " input element " << i << " was modified";
    }
  }
}

// allreduce_once for every count, type, operator and placement.
inline void allreduce_every_type_op_and_placement(Communicator& c,
                                                  const std::vector<size_t>& counts) {
  uint64_t salt = 0;
  for (size_t count : counts) {
    for (DataType type : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        for (bool in_place : {false, true}) {
          allreduce_once(c, count, type, op, in_place, ++salt);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// A broadcast from roots 0, root_step, 2 root_step, ... of every count and type.
inline void broadcast_from_roots(Communicator& c, const std::vector<size_t>& counts,
                                 std::span<const DataType> types, int root_step) {
  const int P = c.size(), r = c.rank();
  for (size_t count : counts) {
    for (DataType type : types) {
      for (int root = 0; root < P; root += root_step) {
        TypedBuffer buf(type, count);
        for (size_t i = 0; i < count; ++i) buf.set(i, r == root ? value(root, i, 3) : -99);
        const Status s = c.broadcast(buf.data(), count, type, root);
        ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.to_string();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf.get(i), value(root, i, 3))
              << "P=" << P << " " << dtype_name(type) << " root=" << root << " rank " << r
              << " element " << i;
        }
      }
    }
  }
}

// An allgather of `per_rank` elements from every rank, for every count, type and placement
// (in place: this rank's block already sits in the output and is the send buffer).
inline void allgather_blocks(Communicator& c, const std::vector<size_t>& per_rank_counts,
                             std::span<const DataType> types, std::span<const bool> placements) {
  const int P = c.size(), r = c.rank();
  for (size_t per_rank : per_rank_counts) {
    for (DataType type : types) {
      for (bool in_place : placements) {
        TypedBuffer in(type, per_rank), out(type, per_rank * P);
        for (size_t i = 0; i < per_rank * P; ++i) out.set(i, -99);
        for (size_t i = 0; i < per_rank; ++i) {
          in.set(i, value(r, i, 11));
          if (in_place) out.set(r * per_rank + i, value(r, i, 11));
        }
        const uint8_t* send =
            in_place ? static_cast<const uint8_t*>(out.data()) + r * per_rank * dtype_size(type)
                     : static_cast<const uint8_t*>(in.data());
        const Status s = c.allgather(send, out.data(), per_rank, type);
        ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.to_string();
        for (int g = 0; g < P; ++g) {
          for (size_t i = 0; i < per_rank; ++i) {
            ASSERT_EQ(out.get(g * per_rank + i), value(g, i, 11))
                << "P=" << P << " " << dtype_name(type) << (in_place ? " in-place" : "") << " rank "
                << r << " block " << g << " element " << i;
          }
        }
      }
    }
  }
}

// Rank q's real-valued input of `count` elements.
inline std::vector<float> real_input(int q, size_t count) {
  std::vector<float> v(count);
  std::mt19937 rng(static_cast<uint32_t>(q * 7919 + count));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : v) x = dist(rng);
  return v;
}

// Floating-point sums depend on the order of additions: the result matches the f64 reference
// within rounding, and every rank holds the same bits (compared by gathering a hash of each
// rank's result), the property partial collectives build on.
inline void real_valued_allreduce_is_bit_identical(Communicator& c,
                                                   const std::vector<size_t>& counts) {
  const int P = c.size(), r = c.rank();
  for (size_t count : counts) {
    std::vector<float> buf = real_input(r, count);
    ASSERT_TRUE(
        c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum).ok());
    uint64_t hash = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
    for (size_t i = 0; i < count * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    std::vector<uint64_t> all(P);
    ASSERT_TRUE(c.allgather(&hash, all.data(), 1, DataType::kInt64).ok());
    for (int q = 0; q < P; ++q) {
      ASSERT_EQ(all[q], all[0]) << "rank " << q << " differs from rank 0 (P=" << P
                                << ", count=" << count << ")";
    }
    if (r != 0) continue;  // the bits are the same everywhere: one rank checks the values
    std::vector<double> ref(count, 0.0);
    for (int q = 0; q < P; ++q) {
      const std::vector<float> in = real_input(q, count);
      for (size_t i = 0; i < count; ++i) ref[i] += in[i];
    }
    for (size_t i = 0; i < count; ++i) ASSERT_NEAR(buf[i], ref[i], 1e-5 * P) << "element " << i;
  }
}

// What a configuration of the staged path (tiny slots, forced algorithms) must still get right:
// allreduces in and out of place, a broadcast from the last rank, a large allgather, a barrier.
inline void staged_path(Communicator& c, const std::vector<size_t>& counts) {
  const int P = c.size(), r = c.rank();
  for (size_t count : counts) {
    allreduce_once(c, count, DataType::kFloat32, ReduceOp::kSum, false, count);
    allreduce_once(c, count, DataType::kFloat32, ReduceOp::kSum, true, count);
    allreduce_once(c, count, DataType::kInt64, ReduceOp::kMax, true, count + 1);
    if (::testing::Test::HasFailure()) return;
    TypedBuffer buf(DataType::kInt32, count);
    for (size_t i = 0; i < count; ++i) buf.set(i, r == P - 1 ? value(9, i, 0) : 0);
    ASSERT_TRUE(c.broadcast(buf.data(), count, DataType::kInt32, P - 1).ok());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf.get(i), value(9, i, 0)) << "element " << i;
  }
  constexpr size_t kBlock = 40000;
  std::vector<float> big(P * kBlock);
  for (size_t i = 0; i < kBlock; ++i) big[r * kBlock + i] = static_cast<float>(r);
  ASSERT_TRUE(c.allgather(big.data() + r * kBlock, big.data(), kBlock, DataType::kFloat32).ok());
  for (int q = 0; q < P; ++q) ASSERT_EQ(big[q * kBlock + kBlock - 1], static_cast<float>(q));
  ASSERT_TRUE(c.barrier().ok());
}

}  // namespace eagercomm::test::cases
