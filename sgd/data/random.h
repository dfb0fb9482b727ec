// Portable random numbers for the data sets (internal to eagercomm_sgd_data).
//
// Every rank must draw the same permutation and the same synthetic samples, whatever standard
// library it was built with. std::shuffle, std::uniform_int_distribution and
// std::normal_distribution are implementation-defined, so the data layer only uses the engines
// (whose output the standard fixes) and the helpers below.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace eagercomm::sgd::detail {

// SplitMix64's finaliser: a bijection that spreads every input bit over the output, so that
// seeds differing in one bit (epoch 3 vs 4, index 7 vs 8) give unrelated streams.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One seed from several words; order matters (mix(a, b) != mix(b, a)).
constexpr uint64_t mix_seed(uint64_t a, uint64_t b) {
  return mix64(mix64(a) ^ (b + 0x632be59bd9b4e019ull));
}
constexpr uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  return mix_seed(mix_seed(a, b), c);
}

// SplitMix64 as a generator: tiny state, cheap to seed per sample (mt19937_64 carries 2.5 KB).
// Satisfies UniformRandomBitGenerator.
class SplitMix64 {
 public:
  using result_type = uint64_t;
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Uniform in [0, bound) without modulo bias (rejection of the short last bucket). bound > 0.
// Works for any generator with the full 64-bit range (mt19937_64, SplitMix64).
template <class Rng>
uint64_t uniform_below(Rng& rng, uint64_t bound) {
  // 2^64 mod bound: the values below it would make small results more likely.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

// Uniform in [0, 1) with 53 random bits.
template <class Rng>
double uniform01(Rng& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller (one of the pair; the other is discarded for simplicity).
template <class Rng>
double standard_normal(Rng& rng) {
  // 1 - u lies in (0, 1], so the log is finite.
  const double u1 = 1.0 - uniform01(rng);
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace eagercomm::sgd::detail
