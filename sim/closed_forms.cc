#include "sim/closed_forms.h"

namespace eagercomm::sim {
namespace {

double alpha(const LogGP& m) { return m.L_ns + 2 * m.o_ns; }

}  // namespace

double ring_allreduce_ns(const LogGP& m, int P, size_t bytes) {
  if (P < 2) return 0;
  const double n = static_cast<double>(bytes), p = P;
  return 2 * (p - 1) * alpha(m) + 2 * (p - 1) / p * n * (m.G_ns_per_byte + m.reduce_ns_per_byte) +
         (2 * (p - 1) - 1) * m.o_ns;
}

double rd_allreduce_ns(const LogGP& m, int P, size_t bytes) {
  if (P < 2) return 0;
  int p2 = 1, steps = 0;
  while (p2 * 2 <= P) {
    p2 *= 2;
    ++steps;
  }
  if (p2 != P) steps += 2;  // the fold and the result's way back
  const double n = static_cast<double>(bytes);
  return steps * (alpha(m) + n * (m.G_ns_per_byte + m.reduce_ns_per_byte)) + (steps - 1) * m.o_ns;
}

}  // namespace eagercomm::sim
