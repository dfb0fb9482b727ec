// The reduction kernels (collectives/kernels/reduce_kernels.h) against reference semantics
// written independently of them: every type, op, count and aliasing, float semantics (NaN,
// signed zeros, rounding), dispatch, and every vector path bit-identical to the generic one.
// One program of two files: the half conversions are reduce_kernels_test_half.cc.
#include "collectives/kernels/reduce_kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/kernels/half.h"

namespace eagercomm {
namespace {

using detail::KernelIsa;

constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1000, 100003};
constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                    DataType::kBFloat16};

// ------------------------------------------------------------------------------------------------
// Reference semantics, written independently of the kernels (values are carried as raw bits).

uint64_t canonical_nan_bits(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 0x7FC00000u;
    case DataType::kFloat64:
      return 0x7FF8000000000000u;
    case DataType::kFloat16:
      return 0x7E00u;
    case DataType::kBFloat16:
      return 0x7FC0u;
    default:
      return 0;
  }
}

template <class F>
F reference_float_op(ReduceOp op, F a, F b) {
  const F nan = std::numeric_limits<F>::quiet_NaN();
  if (std::isnan(a) || std::isnan(b)) return nan;  // canonicalised by the caller
  if (a == 0 && b == 0 && op != ReduceOp::kSum) {
    const bool negative = op == ReduceOp::kMin ? (std::signbit(a) || std::signbit(b))
                                               : (std::signbit(a) && std::signbit(b));
    return negative ? F(-0.0) : F(0.0);
  }
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return nan;
}

template <class I>
I reference_int_op(ReduceOp op, I a, I b) {
  using U = std::make_unsigned_t<I>;
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<I>(static_cast<U>(a) + static_cast<U>(b));
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return 0;
}

uint64_t reference(DataType type, ReduceOp op, uint64_t a, uint64_t b) {
  switch (type) {
    case DataType::kFloat32: {
      const float r = reference_float_op(op, std::bit_cast<float>(static_cast<uint32_t>(a)),
                                         std::bit_cast<float>(static_cast<uint32_t>(b)));
      return std::isnan(r) ? canonical_nan_bits(type) : std::bit_cast<uint32_t>(r);
    }
    case DataType::kFloat64: {
      const double r = reference_float_op(op, std::bit_cast<double>(a), std::bit_cast<double>(b));
      return std::isnan(r) ? canonical_nan_bits(type) : std::bit_cast<uint64_t>(r);
    }
    case DataType::kFloat16: {
      const float r = reference_float_op(op, half_to_float(static_cast<uint16_t>(a)),
                                         half_to_float(static_cast<uint16_t>(b)));
      return std::isnan(r) ? canonical_nan_bits(type) : float_to_half(r);
    }
    case DataType::kBFloat16: {
      const float r = reference_float_op(op, bf16_to_float(static_cast<uint16_t>(a)),
                                         bf16_to_float(static_cast<uint16_t>(b)));
      return std::isnan(r) ? canonical_nan_bits(type) : float_to_bf16(r);
    }
    case DataType::kInt32:
      return static_cast<uint32_t>(
          reference_int_op(op, static_cast<int32_t>(a), static_cast<int32_t>(b)));
    case DataType::kInt64:
      return static_cast<uint64_t>(
          reference_int_op(op, static_cast<int64_t>(a), static_cast<int64_t>(b)));
  }
  return 0;
}

// ------------------------------------------------------------------------------------------------
// Inputs: ordinary values mixed with the special ones the semantics are about.

uint64_t special_bits(DataType type, std::mt19937_64& rng) {
  const uint64_t r = rng();
  switch (type) {
    case DataType::kFloat32: {
      const uint32_t s[] = {0x00000000, 0x80000000,
                            0x7F800000, 0xFF800000,
                            0x7FC00000, 0xFFC00000,
                            0x7F800001, 0x7FA12345,
                            0x00000001, 0x807FFFFF,
                            0x7F7FFFFF, 0xFF7FFFFF,
                            0x00800000, static_cast<uint32_t>(0x7F800000u | (r >> 41) | 1)};
      return s[r % std::size(s)];
    }
    case DataType::kFloat64: {
      const uint64_t s[] = {0,
                            0x8000000000000000u,
                            0x7FF0000000000000u,
                            0xFFF0000000000000u,
                            0x7FF8000000000000u,
                            0xFFF8000000000000u,
                            0x7FF0000000000001u,
                            0x0000000000000001u,
                            0x7FEFFFFFFFFFFFFFu,
                            0x800FFFFFFFFFFFFFu,
                            0xFFF0000000000000u | (r >> 12) | 1};
      return s[r % std::size(s)];
    }
    case DataType::kFloat16: {
      const uint16_t s[] = {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01,
                            0x7D55, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x0400};
      return s[r % std::size(s)];
    }
    case DataType::kBFloat16: {
      const uint16_t s[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81,
                            0x7FA5, 0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x0080};
      return s[r % std::size(s)];
    }
    case DataType::kInt32: {
      const int32_t s[] = {0, -1, 1, std::numeric_limits<int32_t>::max(),
                           std::numeric_limits<int32_t>::min()};
      return static_cast<uint32_t>(s[r % std::size(s)]);
    }
    case DataType::kInt64: {
      const int64_t s[] = {0, -1, 1, std::numeric_limits<int64_t>::max(),
                           std::numeric_limits<int64_t>::min()};
      return static_cast<uint64_t>(s[r % std::size(s)]);
    }
  }
  return 0;
}

uint64_t random_bits(DataType type, std::mt19937_64& rng, int special_percent) {
  const size_t size = dtype_size(type);
  const uint64_t mask = size == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * size)) - 1;
  const uint64_t pick = rng() % 100;
  if (pick < static_cast<uint64_t>(special_percent)) return special_bits(type, rng);
  // Half of the rest: modest magnitudes, so sums round and cancel in interesting ways.
  if (pick % 2 == 0) {
    const double v = std::uniform_real_distribution<double>(-300.0, 300.0)(rng);
    switch (type) {
      case DataType::kFloat32:
        return std::bit_cast<uint32_t>(static_cast<float>(v));
      case DataType::kFloat64:
        return std::bit_cast<uint64_t>(v);
      case DataType::kFloat16:
        return float_to_half(static_cast<float>(v));
      case DataType::kBFloat16:
        return float_to_bf16(static_cast<float>(v));
      case DataType::kInt32:
        return static_cast<uint32_t>(static_cast<int32_t>(v * 1e6));
      case DataType::kInt64:
        return static_cast<uint64_t>(static_cast<int64_t>(v * 1e15));
    }
  }
  return rng() & mask;  // any bit pattern: every exponent, subnormals, NaNs
}

// ------------------------------------------------------------------------------------------------
// Buffers with guard bytes on both sides, to catch a kernel that writes outside its range.

class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 128;
  static constexpr unsigned char kGuard = 0xA5;

  // `offset_elems` shifts the data from a 64-byte boundary (one element: unaligned vectors).
  GuardedBuffer(size_t elem_size, size_t count, size_t offset_elems)
      : elem_size_(elem_size), count_(count), storage_(count * elem_size + 2 * kGuardBytes + 128) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    const uintptr_t aligned = (base + kGuardBytes + 63) & ~uintptr_t{63};
    data_ = reinterpret_cast<unsigned char*>(aligned) + offset_elems * elem_size;
    std::memset(storage_.data(), kGuard, storage_.size());
  }

  void* data() { return data_; }
  uint64_t get(size_t i) const {
    uint64_t v = 0;
    std::memcpy(&v, data_ + i * elem_size_, elem_size_);
    return v;
  }
  void set(size_t i, uint64_t v) { std::memcpy(data_ + i * elem_size_, &v, elem_size_); }
  void copy_from(const GuardedBuffer& other) {
    std::memcpy(data_, other.data_, count_ * elem_size_);
  }
  bool guards_intact() const {
    const unsigned char* end = data_ + count_ * elem_size_;
    for (const unsigned char* p = storage_.data(); p < data_; ++p) {
      if (*p != kGuard) return false;
    }
    for (const unsigned char* p = end; p < storage_.data() + storage_.size(); ++p) {
      if (*p != kGuard) return false;
    }
    return true;
  }

 private:
  size_t elem_size_;
  size_t count_;
  std::vector<unsigned char> storage_;
  unsigned char* data_;
};

// One way of running the kernels: the public (dispatched) entry points or one instruction set.
struct Path {
  std::string name;
  std::function<void(DataType, ReduceOp, void*, const void*, const void*, size_t)> reduce;
  std::function<void(DataType, ReduceOp, void*, void*, const void*, const void*, size_t)> reduce2;
  std::function<void(void*, void*, const void*, size_t)> copy2;
};

std::vector<Path> all_paths() {
  std::vector<Path> paths;
  paths.push_back({"dispatched", &eagercomm::reduce, &eagercomm::reduce2, &eagercomm::copy2});
  for (KernelIsa isa : {KernelIsa::kGeneric, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (!detail::kernel_isa_available(isa)) continue;
    paths.push_back({detail::kernel_isa_name(isa),
                     [isa](DataType t, ReduceOp o, void* out, const void* a, const void* b,
                           size_t n) { detail::reduce_with_isa(isa, t, o, out, a, b, n); },
                     [isa](DataType t, ReduceOp o, void* o1, void* o2, const void* a, const void* b,
                           size_t n) { detail::reduce2_with_isa(isa, t, o, o1, o2, a, b, n); },
                     [isa](void* o1, void* o2, const void* in, size_t n) {
                       detail::copy2_with_isa(isa, o1, o2, in, n);
                     }});
  }
  return paths;
}

std::string describe(const Path& path, DataType type, ReduceOp op, size_t count, const char* mode) {
  return path.name + " " + std::string(dtype_name(type)) + " " + std::string(reduce_op_name(op)) +
         " count=" + std::to_string(count) + " " + mode;
}

// Checks out[i] == reference(a[i], b[i]) for every i; reports the first mismatch only.
::testing::AssertionResult matches_reference(DataType type, ReduceOp op,
                                             const std::vector<uint64_t>& a,
                                             const std::vector<uint64_t>& b,
                                             const GuardedBuffer& out) {
  for (size_t i = 0; i < a.size(); ++i) {
    const uint64_t want = reference(type, op, a[i], b[i]);
    const uint64_t got = out.get(i);
    if (got != want) {
      return ::testing::AssertionFailure()
             << "element " << i << ": op(0x" << std::hex << a[i] << ", 0x" << b[i] << ") = 0x"
             << got << ", want 0x" << want;
    }
  }
  if (!out.guards_intact()) return ::testing::AssertionFailure() << "wrote outside the output";
  return ::testing::AssertionSuccess();
}

std::vector<uint64_t> random_vector(DataType type, size_t count, std::mt19937_64& rng,
                                    int special_percent) {
  std::vector<uint64_t> v(count);
  for (uint64_t& x : v) x = random_bits(type, rng, special_percent);
  return v;
}

void fill(GuardedBuffer& buf, const std::vector<uint64_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) buf.set(i, values[i]);
}

// ------------------------------------------------------------------------------------------------
// reduce / reduce2 / copy2 against the reference.

TEST(ReduceKernels, ReduceMatchesReferenceEveryTypeOpCountAndAliasing) {
  std::mt19937_64 rng(1);
  for (const Path& path : all_paths()) {
    for (DataType type : kAllDataTypes) {
      const size_t esize = dtype_size(type);
      for (ReduceOp op : kAllReduceOps) {
        for (size_t count : kCounts) {
          for (size_t offset : {size_t{0}, size_t{1}}) {
            const std::vector<uint64_t> av = random_vector(type, count, rng, 20);
            const std::vector<uint64_t> bv = random_vector(type, count, rng, 20);
            GuardedBuffer a(esize, count, offset), b(esize, count, offset);
            fill(a, av);
            fill(b, bv);
            const std::string where =
                describe(path, type, op, count, "") + (offset ? " unaligned" : " aligned");

            GuardedBuffer out(esize, count, offset);
            path.reduce(type, op, out.data(), a.data(), b.data(), count);
            EXPECT_TRUE(matches_reference(type, op, av, bv, out)) << where << " out-of-place";
            EXPECT_TRUE(a.guards_intact() && b.guards_intact()) << where;

            GuardedBuffer in_a(esize, count, offset);
            in_a.copy_from(a);
            path.reduce(type, op, in_a.data(), in_a.data(), b.data(), count);
            EXPECT_TRUE(matches_reference(type, op, av, bv, in_a)) << where << " out==a";

            GuardedBuffer in_b(esize, count, offset);
            in_b.copy_from(b);
            path.reduce(type, op, in_b.data(), a.data(), in_b.data(), count);
            EXPECT_TRUE(matches_reference(type, op, av, bv, in_b)) << where << " out==b";
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, Reduce2WritesTheSameResultToBothOutputs) {
  // Which inputs the outputs alias: (out1, out2).
  enum class Src { kOwn, kA, kB };
  const std::pair<Src, Src> modes[] = {
      {Src::kOwn, Src::kOwn}, {Src::kA, Src::kOwn}, {Src::kB, Src::kOwn}, {Src::kOwn, Src::kA},
      {Src::kOwn, Src::kB},   {Src::kA, Src::kB},   {Src::kB, Src::kA}};
  std::mt19937_64 rng(2);
  for (const Path& path : all_paths()) {
    for (DataType type : kAllDataTypes) {
      const size_t esize = dtype_size(type);
      for (ReduceOp op : kAllReduceOps) {
        for (size_t count : kCounts) {
          const std::vector<uint64_t> av = random_vector(type, count, rng, 20);
          const std::vector<uint64_t> bv = random_vector(type, count, rng, 20);
          for (const auto& [src1, src2] : modes) {
            GuardedBuffer a(esize, count, 1), b(esize, count, 1);
            GuardedBuffer own1(esize, count, 1), own2(esize, count, 1);
            fill(a, av);
            fill(b, bv);
            auto pick = [&](Src s, GuardedBuffer& own) -> GuardedBuffer& {
              return s == Src::kA ? a : s == Src::kB ? b : own;
            };
            GuardedBuffer& out1 = pick(src1, own1);
            GuardedBuffer& out2 = pick(src2, own2);
            path.reduce2(type, op, out1.data(), out2.data(), a.data(), b.data(), count);
            const std::string where = describe(path, type, op, count, "reduce2") + " mode " +
                                      std::to_string(static_cast<int>(src1)) +
                                      std::to_string(static_cast<int>(src2));
            EXPECT_TRUE(matches_reference(type, op, av, bv, out1)) << where << " out1";
            EXPECT_TRUE(matches_reference(type, op, av, bv, out2)) << where << " out2";
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, Copy2CopiesToBothOutputsAndNothingElse) {
  const size_t sizes[] = {
      0, 1, 7, 31, 63, 64, 65, 127, 128, 255, 256, 257, 1000, 100003, (size_t{1} << 20) + 13};
  std::mt19937_64 rng(3);
  for (const Path& path : all_paths()) {
    for (size_t bytes : sizes) {
      for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
        GuardedBuffer in(1, bytes, offset), out1(1, bytes, (offset + 1) % 4),
            out2(1, bytes, (offset + 2) % 4);
        for (size_t i = 0; i < bytes; ++i) in.set(i, rng() & 0xFF);
        path.copy2(out1.data(), out2.data(), in.data(), bytes);
        const std::string where = path.name + " copy2 bytes=" + std::to_string(bytes) +
                                  " offset=" + std::to_string(offset);
        EXPECT_EQ(std::memcmp(out1.data(), in.data(), bytes), 0) << where;
        EXPECT_EQ(std::memcmp(out2.data(), in.data(), bytes), 0) << where;
        EXPECT_TRUE(out1.guards_intact() && out2.guards_intact() && in.guards_intact()) << where;
      }
    }
  }
}

TEST(ReduceKernels, ZeroCountAcceptsNullPointers) {
  for (const Path& path : all_paths()) {
    for (DataType type : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        path.reduce(type, op, nullptr, nullptr, nullptr, 0);
        path.reduce2(type, op, nullptr, nullptr, nullptr, nullptr, 0);
      }
    }
    path.copy2(nullptr, nullptr, nullptr, 0);
  }
}

TEST(ReduceKernels, InvalidTypeOrOpWritesNothing) {
  std::vector<float> a(64, 1.0f), b(64, 2.0f), out(64, 7.0f), out2(64, 7.0f);
  reduce(static_cast<DataType>(42), ReduceOp::kSum, out.data(), a.data(), b.data(), 64);
  reduce(DataType::kFloat32, static_cast<ReduceOp>(42), out.data(), a.data(), b.data(), 64);
  reduce2(static_cast<DataType>(6), ReduceOp::kSum, out.data(), out2.data(), a.data(), b.data(),
          64);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(out[i], 7.0f);
    ASSERT_EQ(out2[i], 7.0f);
  }
}

// ------------------------------------------------------------------------------------------------
// The rules that keep replicas identical.

TEST(ReduceKernels, FloatOpsAreCommutativeBitForBitWithNansAndZeros) {
  std::mt19937_64 rng(4);
  constexpr size_t kCount = 4099;  // vector body plus a tail on every path
  for (const Path& path : all_paths()) {
    for (DataType type : kFloatTypes) {
      const size_t esize = dtype_size(type);
      for (ReduceOp op : kAllReduceOps) {
        // Mostly specials: NaNs of every sign and payload, both zeros, infinities.
        std::vector<uint64_t> av = random_vector(type, kCount, rng, 70);
        std::vector<uint64_t> bv = random_vector(type, kCount, rng, 70);
        for (size_t i = 0; i < kCount; i += 5) bv[i] = av[i] ^ (uint64_t{1} << (8 * esize - 1));
        GuardedBuffer a(esize, kCount, 1), b(esize, kCount, 1);
        GuardedBuffer ab(esize, kCount, 1), ba(esize, kCount, 1);
        fill(a, av);
        fill(b, bv);
        path.reduce(type, op, ab.data(), a.data(), b.data(), kCount);
        path.reduce(type, op, ba.data(), b.data(), a.data(), kCount);
        for (size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(ab.get(i), ba.get(i)) << describe(path, type, op, kCount, "") << " element "
                                          << i << std::hex << " a=0x" << av[i] << " b=0x" << bv[i];
        }
      }
    }
  }
}

// Runs one element through every path and returns the result bits (all paths must agree).
uint64_t apply_everywhere(DataType type, ReduceOp op, uint64_t a, uint64_t b) {
  // 37 copies: the vector body and the tail of every path see the value.
  constexpr size_t kCount = 37;
  const size_t esize = dtype_size(type);
  std::vector<uint64_t> result;
  for (const Path& path : all_paths()) {
    GuardedBuffer ba(esize, kCount, 1), bb(esize, kCount, 1), out(esize, kCount, 1);
    for (size_t i = 0; i < kCount; ++i) {
      ba.set(i, a);
      bb.set(i, b);
    }
    path.reduce(type, op, out.data(), ba.data(), bb.data(), kCount);
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(out.get(i), out.get(0)) << path.name << " element " << i;
    }
    result.push_back(out.get(0));
  }
  for (uint64_t r : result) EXPECT_EQ(r, result[0]);
  return result[0];
}

TEST(ReduceKernels, SignedZerosMinIsNegativeMaxIsPositiveInEitherOrder) {
  const std::pair<DataType, uint64_t> sign_bits[] = {{DataType::kFloat32, 0x80000000u},
                                                     {DataType::kFloat64, 0x8000000000000000u},
                                                     {DataType::kFloat16, 0x8000u},
                                                     {DataType::kBFloat16, 0x8000u}};
  for (const auto& [type, neg_zero] : sign_bits) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kMin, neg_zero, 0), neg_zero);
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kMin, 0, neg_zero), neg_zero);
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kMax, neg_zero, 0), 0u);
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kMax, 0, neg_zero), 0u);
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kMin, neg_zero, neg_zero), neg_zero);
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kMax, 0, 0), 0u);
    // IEEE: (-0) + (+0) = +0, (-0) + (-0) = -0.
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kSum, neg_zero, 0), 0u);
    EXPECT_EQ(apply_everywhere(type, ReduceOp::kSum, neg_zero, neg_zero), neg_zero);
  }
}

TEST(ReduceKernels, AnyNanInputGivesTheCanonicalQuietNan) {
  struct Case {
    DataType type;
    uint64_t one, negative_nan_with_payload, signaling_nan, inf, neg_inf;
  };
  const Case cases[] = {
      {DataType::kFloat32, 0x3F800000u, 0xFFC12345u, 0x7F800001u, 0x7F800000u, 0xFF800000u},
      {DataType::kFloat64, 0x3FF0000000000000u, 0xFFF8000000012345u, 0x7FF0000000000001u,
       0x7FF0000000000000u, 0xFFF0000000000000u},
      {DataType::kFloat16, 0x3C00u, 0xFE55u, 0x7C01u, 0x7C00u, 0xFC00u},
      {DataType::kBFloat16, 0x3F80u, 0xFFC5u, 0x7F81u, 0x7F80u, 0xFF80u},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.type)));
    const uint64_t nan = canonical_nan_bits(c.type);
    for (ReduceOp op : kAllReduceOps) {
      for (uint64_t weird : {c.negative_nan_with_payload, c.signaling_nan}) {
        EXPECT_EQ(apply_everywhere(c.type, op, weird, c.one), nan);
        EXPECT_EQ(apply_everywhere(c.type, op, c.one, weird), nan);
        EXPECT_EQ(apply_everywhere(c.type, op, weird, c.inf), nan);
        EXPECT_EQ(apply_everywhere(c.type, op, c.neg_inf, weird), nan);
      }
      EXPECT_EQ(apply_everywhere(c.type, op, c.negative_nan_with_payload, c.signaling_nan), nan);
    }
    // inf - inf makes a NaN out of non-NaN inputs (x86 would make it negative).
    EXPECT_EQ(apply_everywhere(c.type, ReduceOp::kSum, c.inf, c.neg_inf), nan);
    EXPECT_EQ(apply_everywhere(c.type, ReduceOp::kMin, c.inf, c.neg_inf), c.neg_inf);
    EXPECT_EQ(apply_everywhere(c.type, ReduceOp::kMax, c.inf, c.neg_inf), c.inf);
  }
}

TEST(ReduceKernels, SixteenBitSumsRoundToNearestEvenAndOverflowToInfinity) {
  // f16: 65504 + 16 = 65520 is the tie between 65504 and 2^16 (odd mantissa): rounds to inf.
  EXPECT_EQ(apply_everywhere(DataType::kFloat16, ReduceOp::kSum, 0x7BFF, 0x4C00), 0x7C00u);
  EXPECT_EQ(apply_everywhere(DataType::kFloat16, ReduceOp::kSum, 0x7BFF, 0x7BFF), 0x7C00u);
  // 2048 + 1 = 2049: tie between 2048 and 2050 -> 2048 (even); 2050 + 1 -> 2052.
  EXPECT_EQ(apply_everywhere(DataType::kFloat16, ReduceOp::kSum, 0x6800, 0x3C00), 0x6800u);
  EXPECT_EQ(apply_everywhere(DataType::kFloat16, ReduceOp::kSum, 0x6801, 0x3C00), 0x6802u);
  // Subnormals add exactly: 2^-24 + 2^-24 = 2^-23; largest subnormal + 2^-24 = smallest normal.
  EXPECT_EQ(apply_everywhere(DataType::kFloat16, ReduceOp::kSum, 0x0001, 0x0001), 0x0002u);
  EXPECT_EQ(apply_everywhere(DataType::kFloat16, ReduceOp::kSum, 0x03FF, 0x0001), 0x0400u);
  // bf16: 256 + 1 = 257 is the tie between 256 and 258 -> 256; 258 + 1 -> 260.
  EXPECT_EQ(apply_everywhere(DataType::kBFloat16, ReduceOp::kSum, 0x4380, 0x3F80), 0x4380u);
  EXPECT_EQ(apply_everywhere(DataType::kBFloat16, ReduceOp::kSum, 0x4381, 0x3F80), 0x4382u);
  EXPECT_EQ(apply_everywhere(DataType::kBFloat16, ReduceOp::kSum, 0x7F7F, 0x7F7F), 0x7F80u);
  EXPECT_EQ(apply_everywhere(DataType::kBFloat16, ReduceOp::kSum, 0x0001, 0x0001), 0x0002u);
}

TEST(ReduceKernels, IntegerSumWrapsAround) {
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  auto i32 = [](int32_t v) { return static_cast<uint64_t>(static_cast<uint32_t>(v)); };
  auto i64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  EXPECT_EQ(apply_everywhere(DataType::kInt32, ReduceOp::kSum, i32(kMax32), i32(1)), i32(kMin32));
  EXPECT_EQ(apply_everywhere(DataType::kInt32, ReduceOp::kSum, i32(kMin32), i32(-1)), i32(kMax32));
  EXPECT_EQ(apply_everywhere(DataType::kInt32, ReduceOp::kSum, i32(kMin32), i32(kMin32)), 0u);
  EXPECT_EQ(apply_everywhere(DataType::kInt64, ReduceOp::kSum, i64(kMax64), i64(1)), i64(kMin64));
  EXPECT_EQ(apply_everywhere(DataType::kInt64, ReduceOp::kSum, i64(kMin64), i64(-1)), i64(kMax64));
  EXPECT_EQ(apply_everywhere(DataType::kInt64, ReduceOp::kSum, i64(kMax64), i64(kMax64)), i64(-2));
  // min/max are signed comparisons.
  EXPECT_EQ(apply_everywhere(DataType::kInt32, ReduceOp::kMin, i32(kMin32), i32(kMax32)),
            i32(kMin32));
  EXPECT_EQ(apply_everywhere(DataType::kInt32, ReduceOp::kMax, i32(-1), i32(0)), i32(0));
  EXPECT_EQ(apply_everywhere(DataType::kInt64, ReduceOp::kMin, i64(kMin64), i64(kMax64)),
            i64(kMin64));
  EXPECT_EQ(apply_everywhere(DataType::kInt64, ReduceOp::kMax, i64(-1), i64(kMin64)), i64(-1));
}

// ------------------------------------------------------------------------------------------------
// Dispatch.

TEST(ReduceKernels, DispatchPicksTheBestAvailableInstructionSet) {
  const KernelIsa isa = detail::dispatched_kernel_isa();
  EXPECT_TRUE(detail::kernel_isa_available(isa));
  EXPECT_STREQ(reduce_kernels_isa(), detail::kernel_isa_name(isa));
  EXPECT_TRUE(detail::kernel_isa_available(KernelIsa::kGeneric));
  if (detail::kernel_isa_available(KernelIsa::kAvx512)) {
    EXPECT_EQ(isa, KernelIsa::kAvx512);
    EXPECT_TRUE(detail::kernel_isa_available(KernelIsa::kAvx2));
  } else if (detail::kernel_isa_available(KernelIsa::kAvx2)) {
    EXPECT_EQ(isa, KernelIsa::kAvx2);
  } else {
    EXPECT_EQ(isa, KernelIsa::kGeneric);
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_EQ(isa, KernelIsa::kAvx512);
  }
#endif
  std::printf("reduce kernels dispatch to: %s\n", reduce_kernels_isa());
}

TEST(ReduceKernels, EveryVectorPathIsBitIdenticalToTheGenericPath) {
  bool any_vector_path = false;
  std::mt19937_64 rng(5);
  for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (!detail::kernel_isa_available(isa)) continue;
    any_vector_path = true;
    for (DataType type : kAllDataTypes) {
      const size_t esize = dtype_size(type);
      for (ReduceOp op : kAllReduceOps) {
        for (size_t count : {size_t{100003}, size_t{33}, size_t{5}}) {
          for (int special_percent : {0, 30}) {
            GuardedBuffer a(esize, count, 1), b(esize, count, 1);
            fill(a, random_vector(type, count, rng, special_percent));
            fill(b, random_vector(type, count, rng, special_percent));
            GuardedBuffer want(esize, count, 0), got(esize, count, 0), got2(esize, count, 1);
            detail::reduce_with_isa(KernelIsa::kGeneric, type, op, want.data(), a.data(), b.data(),
                                    count);
            detail::reduce_with_isa(isa, type, op, got.data(), a.data(), b.data(), count);
            detail::reduce2_with_isa(isa, type, op, got2.data(), b.data(), a.data(), b.data(),
                                     count);
            ASSERT_EQ(std::memcmp(want.data(), got.data(), count * esize), 0)
                << detail::kernel_isa_name(isa) << " " << dtype_name(type) << " "
                << reduce_op_name(op) << " count " << count;
            ASSERT_EQ(std::memcmp(want.data(), got2.data(), count * esize), 0)
                << detail::kernel_isa_name(isa) << " reduce2 " << dtype_name(type) << " "
                << reduce_op_name(op) << " count " << count;
            ASSERT_EQ(std::memcmp(want.data(), b.data(), count * esize), 0);
          }
        }
      }
    }
  }
  if (!any_vector_path) GTEST_SKIP() << "only the generic path runs on this machine";
}

}  // namespace
}  // namespace eagercomm
