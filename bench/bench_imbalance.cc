#include "bench/bench_imbalance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "collectives/kernels/element_value.h"
#include "collectives/partial_allreduce.h"

namespace eagercomm::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The K ranks drawn for `iteration` (a shuffle seeded by seed and iteration: same everywhere).
std::vector<int> drawn_ranks(uint64_t seed, int iteration, int ranks, int k) {
  std::vector<int> all(ranks);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(iteration));
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min(k, ranks));
  return all;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

void sleep_ms(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

struct Samples {
  std::vector<double> ms;       // per timed iteration
  std::vector<double> delayed;  // 1 when the rank slept in it
  double fresh_sum = 0;
  uint64_t rounds = 0;
  double age_sum = 0;
  uint64_t ages = 0;
  int age_max = 0;
};

PartialMode mode_named(const std::string& name, int ranks) {
  if (name == "quorum") return PartialMode::quorum_of(std::max(1, ranks / 2));
  return parse_partial_mode(name).value();
}

// `baseline`: another library's full allreduce runs instead of eagercomm's (mode is its name).
Result<Samples> run_mode(Communicator& comm, const Options& o, const std::string& mode,
                         double delay, size_t count, const Baseline* baseline) {
  const int P = comm.size(), rank = comm.rank();
  const size_t es = dtype_size(o.type);
  std::vector<uint8_t> send(count * es + 8), recv(count * es + 8);
  for (size_t i = 0; i < count; ++i) store_element(o.type, send.data(), i, (i + rank) % 7);
  Samples s;
  std::unique_ptr<PartialAllreduce> pa;
  const bool full = mode == "full" || baseline != nullptr;
  if (!full) {
    PartialOptions po;
    po.seed = o.seed;
    po.result_depth = o.result_depth;
    EC_ASSIGN_OR_RETURN(pa, PartialAllreduce::create(comm, count, o.type, mode_named(mode, P), po));
  }
  auto record = [&](const RoundResult& r, bool timed) {
    if (!timed) return;
    s.fresh_sum += static_cast<double>(r.fresh_count()) / P;
    ++s.rounds;
    for (int q = 0; q < P; ++q) {
      const int age = r.age(q);
      if (age < 0) continue;
      s.age_sum += age;
      ++s.ages;
      s.age_max = std::max(s.age_max, age);
    }
  };
  EC_RETURN_IF_ERROR(comm.barrier());
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    const bool timed = it >= o.warmup;
    const double d = injected_delay_ms(o, P, rank, it, delay);
    const auto t0 = Clock::now();
    sleep_ms(o.compute_ms + d);
    if (baseline) {
      EC_RETURN_IF_ERROR(
          baseline->allreduce(send.data(), recv.data(), count, o.type, ReduceOp::kSum));
    } else if (!pa) {
      EC_RETURN_IF_ERROR(comm.allreduce(send.data(), recv.data(), count, o.type, ReduceOp::kSum));
    } else {
      EC_RETURN_IF_ERROR(pa->post(send.data(), count, o.type));
      bool got = false;
      for (;;) {
        EC_ASSIGN_OR_RETURN(std::optional<RoundResult> r, pa->poll());
        if (!r) break;
        record(*r, timed);
        got = true;
      }
      if (!got) {
        EC_ASSIGN_OR_RETURN(RoundResult r, pa->wait());
        record(r, timed);
      }
    }
    if (timed) {
      s.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      s.delayed.push_back(d > 0 ? 1.0 : 0.0);
    }
  }
  if (pa) {
    EC_RETURN_IF_ERROR(pa->flush([](RoundResult&&) {}).status());
    pa->destroy();
  }
  if (full) s.fresh_sum = static_cast<double>(s.rounds = o.iters);
  return s;
}

}  // namespace

double injected_delay_ms(const Options& o, int ranks, int rank, int iteration, double delay_ms) {
  switch (o.pattern) {
    case DelayPattern::kFixed:
      return rank >= ranks - o.delayed ? delay_ms : 0;
    case DelayPattern::kRandom: {
      const auto drawn = drawn_ranks(o.seed, iteration, ranks, o.delayed);
      return std::find(drawn.begin(), drawn.end(), rank) != drawn.end() ? delay_ms : 0;
    }
    case DelayPattern::kLinear:
      return ranks > 1 ? delay_ms * rank / (ranks - 1) : 0;
    case DelayPattern::kExp: {
      const auto drawn = drawn_ranks(o.seed, iteration, ranks, o.delayed);
      if (std::find(drawn.begin(), drawn.end(), rank) == drawn.end()) return 0;
      std::mt19937_64 rng(o.seed * 31 + static_cast<uint64_t>(iteration) * 1000003 + rank);
      return std::exponential_distribution<double>(1.0 / std::max(delay_ms, 1e-9))(rng);
    }
  }
  return 0;
}

Result<std::vector<ImbalanceRow>> run_imbalance(Communicator& comm, const Options& o,
                                                const std::vector<Baseline>& baselines) {
  std::vector<std::pair<std::string, const Baseline*>> modes;
  for (const Baseline& b : baselines) modes.emplace_back(b.name, &b);
  for (const std::string& m : o.modes) modes.emplace_back(m, nullptr);
  const int P = comm.size();
  const size_t es = dtype_size(o.type);
  std::vector<ImbalanceRow> rows;
  for (double delay : o.delays_ms) {
    for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes);
         b *= o.factor) {
      const size_t count = std::max<size_t>(1, static_cast<size_t>(b) / es);
      double full_fast = std::nan(""), full_mean = std::nan(""), baseline_fast = std::nan("");
      size_t first_row = rows.size();
      for (const auto& [mode, baseline] : modes) {
        EC_ASSIGN_OR_RETURN(Samples s, run_mode(comm, o, mode, delay, count, baseline));
        // Every rank's iteration times, to split by delayed / not delayed.
        std::vector<double> mine = s.ms;
        mine.insert(mine.end(), s.delayed.begin(), s.delayed.end());
        std::vector<double> all(mine.size() * P);
        EC_RETURN_IF_ERROR(
            comm.allgather(mine.data(), all.data(), mine.size(), DataType::kFloat64));
        std::vector<double> fast, slow;
        const size_t n = s.ms.size();
        for (int r = 0; r < P; ++r) {
          for (size_t i = 0; i < n; ++i) {
            (all[r * 2 * n + n + i] > 0 ? slow : fast).push_back(all[r * 2 * n + i]);
          }
        }
        ImbalanceRow row;
        row.delay_ms = delay;
        row.bytes = count * es;
        row.mode = mode == "full" || baseline ? mode : mode_named(mode, P).name();
        row.fast_median_ms = percentile(fast, 0.5);
        row.fast_p99_ms = percentile(fast, 0.99);
        auto mean = [](const std::vector<double>& v) {
          return v.empty()
                     ? std::nan("")
                     : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
        };
        row.fast_mean_ms = mean(fast);
        row.slow_mean_ms = mean(slow);
        row.slow_median_ms = percentile(slow, 0.5);
        row.slow_p99_ms = percentile(slow, 0.99);
        row.rounds = s.rounds;
        row.fresh_fraction = s.rounds ? s.fresh_sum / s.rounds : 0;
        row.stale_mean = s.ages ? s.age_sum / s.ages : 0;
        row.stale_max = s.age_max;
        if (mode == "full") {
          full_fast = row.fast_median_ms;
          full_mean = row.fast_mean_ms;
        }
        if (baseline && baseline == &baselines.front()) baseline_fast = row.fast_median_ms;
        rows.push_back(row);
      }
      // Ratios once every mode ran (the baselines run before eagercomm's full allreduce).
      for (size_t i = first_row; i < rows.size(); ++i) {
        rows[i].vs_full = rows[i].fast_median_ms / full_fast;
        rows[i].vs_full_mean = rows[i].fast_mean_ms / full_mean;
        rows[i].vs_baseline = rows[i].fast_median_ms / baseline_fast;
      }
      if (o.factor <= 1) break;
    }
  }
  return rows;
}

void print_imbalance(FILE* out, const Options& o, int ranks, const std::string& transport,
                     const std::vector<ImbalanceRow>& rows,
                     const std::vector<Baseline>& baselines) {
  const bool vs = !baselines.empty();
  const std::string vs_name = vs ? baselines.front().name : "";
  std::fprintf(out,
               "# eagercomm-bench --imbalance: %d ranks, transport %s, %s, pattern %s, "
               "%d delayed, compute %.3g ms, %d iterations (warm-up %d), result depth %u, seed "
               "%llu\n",
               ranks, transport.c_str(), std::string(dtype_name(o.type)).c_str(),
               pattern_name(o.pattern), o.delayed, o.compute_ms, o.iters, o.warmup, o.result_depth,
               static_cast<unsigned long long>(o.seed));
  std::fprintf(out,
               "# time per iteration (injected delay included) on ranks not delayed (fast) "
               "and delayed (slow) in that iteration\n");
  for (const Baseline& b : baselines) {
    std::fprintf(out, "# mode %s: %s's allreduce (%s)\n", b.name.c_str(), b.name.c_str(),
                 b.description.c_str());
  }
  std::fprintf(out, "#%7s %10s %14s %9s %9s %9s %9s %9s %6s %7s %5s %7s %7s", "delay", "size",
               "mode", "fast med", "fast p99", "fast mean", "slow med", "slow p99", "fresh",
               "stale", "stale", "fast vs", "mean vs");
  if (vs) std::fprintf(out, " %7s", "fast vs");
  std::fprintf(out, "\n#%7s %10s %14s %9s %9s %9s %9s %9s %6s %7s %5s %7s %7s", "(ms)", "(B)", "",
               "(ms)", "(ms)", "(ms)", "(ms)", "(ms)", "", "mean", "max", "full", "full");
  if (vs) std::fprintf(out, " %7s", vs_name.c_str());
  std::fprintf(out, "\n");
  for (const ImbalanceRow& r : rows) {
    std::fprintf(out, " %7.1f %10zu %14s %9.3f %9.3f %9.3f %9.3f %9.3f %6.2f %7.2f %5d %7.2f %7.2f",
                 r.delay_ms, r.bytes, r.mode.c_str(), r.fast_median_ms, r.fast_p99_ms,
                 r.fast_mean_ms, r.slow_median_ms, r.slow_p99_ms, r.fresh_fraction, r.stale_mean,
                 r.stale_max, r.vs_full, r.vs_full_mean);
    if (vs) std::fprintf(out, " %7.2f", r.vs_baseline);
    std::fprintf(out, "\n");
  }
}

std::string imbalance_json(const Options& o, int ranks, const std::string& transport,
                           const std::vector<ImbalanceRow>& rows) {
  auto num = [](double x) {
    if (!std::isfinite(x)) return std::string("null");
    char b[64];
    std::snprintf(b, sizeof(b), "%.6g", x);
    return std::string(b);
  };
  std::string s = "{\n  \"benchmark\": \"eagercomm-bench --imbalance\",\n";
  s += "  \"ranks\": " + std::to_string(ranks) + ",\n";
  s += "  \"transport\": \"" + transport + "\",\n";
  s += "  \"type\": \"" + std::string(dtype_name(o.type)) + "\",\n";
  s += "  \"pattern\": \"" + std::string(pattern_name(o.pattern)) + "\",\n";
  s += "  \"delayed\": " + std::to_string(o.delayed) + ",\n";
  s += "  \"compute_ms\": " + num(o.compute_ms) + ",\n";
  s += "  \"result_depth\": " + std::to_string(o.result_depth) + ",\n";
  s += "  \"iters\": " + std::to_string(o.iters) + ",\n";
  s += "  \"seed\": " + std::to_string(o.seed) + ",\n  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ImbalanceRow& r = rows[i];
    s += i ? ",\n    " : "\n    ";
    s += "{\"delay_ms\": " + num(r.delay_ms) + ", \"bytes\": " + std::to_string(r.bytes) +
         ", \"mode\": \"" + r.mode + "\", \"fast_median_ms\": " + num(r.fast_median_ms) +
         ", \"fast_p99_ms\": " + num(r.fast_p99_ms) + ", \"fast_mean_ms\": " + num(r.fast_mean_ms) +
         ", \"slow_median_ms\": " + num(r.slow_median_ms) +
         ", \"slow_mean_ms\": " + num(r.slow_mean_ms) + ", \"slow_p99_ms\": " + num(r.slow_p99_ms) +
         ", \"fresh_fraction\": " + num(r.fresh_fraction) +
         ", \"stale_mean\": " + num(r.stale_mean) +
         ", \"stale_max\": " + std::to_string(r.stale_max) +
         ", \"rounds\": " + std::to_string(r.rounds) + ", \"vs_full\": " + num(r.vs_full) +
         ", \"vs_full_mean\": " + num(r.vs_full_mean) + ", \"vs_baseline\": " + num(r.vs_baseline) +
         "}";
  }
  s += "\n  ]\n}\n";
  return s;
}

}  // namespace eagercomm::bench
