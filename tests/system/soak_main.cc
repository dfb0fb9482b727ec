// The partial-allreduce soak (issue #7): every rank of a job runs the eager-SGD loop of
// tests/collectives/partial_scenario.h for --rounds posts with seeded random delays, flushes, and
// then the ranks check together that the replicas are identical (a hash of every result each rank
// saw) and that nothing was lost or counted twice (the results sum to everybody's posts, exactly).
//
//   eagercomm-run -n 4 --transport shm tests/soak_main --rounds 100000 [--mode solo]
//       [--seed S] [--max-delay-us D] [--delay-probability p]
//
// tests/system/soak.sh runs the long version; ctest runs a short one. Exit 0 only when every check
// held.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collectives/communicator.h"
#include "tests/collectives/partial_scenario.h"

namespace {

using namespace eagercomm;
using namespace eagercomm::test;

int usage(const char* why) {
  std::fprintf(stderr,
               "soak_main: %s\nusage: soak_main [--rounds N] [--mode solo|majority|sync|quorum:K] "
               "[--seed S] [--max-delay-us D] [--delay-probability P]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Scenario s;
  s.iterations = 2000;
  s.mode = PartialMode::solo();
  s.max_delay_us = 200;
  s.delay_probability = 0.3;
  s.seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(("missing value after " + flag).c_str());
    const std::string v = argv[++i];
    char* end = nullptr;
    if (flag == "--rounds") {
      s.iterations = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != 0 || s.iterations < 1) return usage("--rounds: a positive integer");
    } else if (flag == "--seed") {
      s.seed = std::strtoull(v.c_str(), &end, 10);
      if (*end != 0) return usage("--seed: an integer");
    } else if (flag == "--max-delay-us") {
      s.max_delay_us = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != 0 || s.max_delay_us < 0) return usage("--max-delay-us: an integer >= 0");
    } else if (flag == "--delay-probability") {
      s.delay_probability = std::strtod(v.c_str(), &end);
      if (*end != 0 || !(s.delay_probability >= 0 && s.delay_probability <= 1)) {
        return usage("--delay-probability: a number in [0, 1]");
      }
    } else if (flag == "--mode") {
      Result<PartialMode> m = parse_partial_mode(v);
      if (!m.ok()) return usage(m.status().message().c_str());
      s.mode = m.value();
    } else {
      return usage(("unknown option " + flag).c_str());
    }
  }
  auto made = Communicator::from_env();
  if (!made.ok()) {
    std::fprintf(stderr, "soak_main: %s\n", made.status().to_string().c_str());
    return 1;
  }
  Communicator& c = *made.value();
  const int P = c.size();
  s.ranks = P;
  RankRecord me = run_rank(c.rank(), c, s);
  if (!me.error.ok()) {
    std::fprintf(stderr, "soak_main: rank %d: %s\n", c.rank(), me.error.to_string().c_str());
    return 1;
  }
  double fresh = 0;
  for (const Received& x : me.results) fresh += static_cast<double>(x.fresh_count) / P;
  std::vector<int64_t> hashes(P);
  const int64_t mine = static_cast<int64_t>(results_hash(me.results));
  Status st = c.allgather(&mine, hashes.data(), 1, DataType::kInt64);
  // Conservation: the results sum to everybody's posts.
  const std::vector<double> results = results_sum(me.results, s.count);
  std::vector<double> posted = me.posted;
  if (st.ok()) {
    st = c.allreduce(posted.data(), posted.data(), s.count, DataType::kFloat64, ReduceOp::kSum);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "soak_main: rank %d: %s\n", c.rank(), st.to_string().c_str());
    return 1;
  }
  int bad = 0;
  for (int q = 1; q < P; ++q) bad += hashes[q] != hashes[0];
  size_t lost = 0;
  for (size_t j = 0; j < s.count; ++j) lost += results[j] != posted[j];
  if (c.rank() == 0 || bad || lost) {
    std::printf(
        "soak: rank %d of %d, %s, %d posts, %zu rounds applied (fresh %.2f), %.1f s: "
        "replicas %s, conservation %s\n",
        c.rank(), P, s.mode.name().c_str(), s.iterations, me.results.size(),
        me.results.empty() ? 0.0 : fresh / static_cast<double>(me.results.size()),
        me.loop_ms / 1000, bad ? "DIFFER" : "identical", lost ? "BROKEN" : "exact");
  }
  (void)c.barrier();
  return bad || lost ? 1 : 0;
}
