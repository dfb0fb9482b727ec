// eagercomm-sim: the real collectives of P ranks on a simulated network (issue 21).
//
//   eagercomm-sim [--ranks 2,4,...] [--bytes 8,1K,1M] [--coll allreduce|broadcast|barrier]
//                 [--algo auto|ring|rd] [--link hdr|ndr|L=..] [--iters N] [--elide SIZE]
//                 [--json FILE]
//   eagercomm-sim --modes solo,majority,quorum:K,sync [--stragglers 1%|N] [--delay-steps D]
//                 [--compute-us C] [--steps N] [--seed S] [--ranks ...] [--bytes ...]
//   eagercomm-sim --activation [--ranks ...] [--link ...]
//   eagercomm-sim --explore SEED[:COUNT]
//
// Collectives: for each P and size, the virtual time of the first call (until its last rank
// finished), the LogGP closed form of the algorithm (allreduce), their ratio, the mean time per
// call of back-to-back calls, the messages per call and the wall time
// of the run. Partial allreduce (--modes): for each P, size and mode, the mean step time of the
// ranks not drawn as stragglers, with and without stragglers, their ratio, the fresh fraction
// and the staleness. A table and, with --json, a JSON array (one object per row).
// --explore: the schedule explorer (sim/explorer.h) over seeds SEED .. SEED + COUNT - 1; prints
// every broken invariant with its seed (run that seed alone to replay it) and a summary; exit
// status 1 if any seed broke one.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/partial_allreduce.h"
#include "sim/closed_forms.h"
#include "sim/collective_sim.h"
#include "sim/explorer.h"
#include "sim/partial_sim.h"

namespace {

using namespace eagercomm;
using namespace eagercomm::sim;

void usage() {
  std::printf(
      "usage: eagercomm-sim [options]\n"
      "  --ranks LIST     world sizes, comma-separated [2,4,8,16,32,64]\n"
      "  --bytes LIST     sizes per rank (K, M, G suffixes) [8,1K,64K,1M]\n"
      "  --coll NAME      allreduce | broadcast | barrier [allreduce]\n"
      "  --algo NAME      auto | ring | rd: EAGERCOMM_ALLREDUCE_ALGO [auto]\n"
      "  --link SPEC      hdr | ndr (presets), or L=NS,o=NS,g=NS,bw=GBPS[,reduce=GBPS] [hdr]\n"
      "  --iters N        calls per run [3]\n"
      "  --elide SIZE     vectors above SIZE are timed, not copied: their messages deliver\n"
      "                   their first page, nothing is reduced, the result is not checked [64M]\n"
      "  --calls          print when each call ended\n"
      "  --trace FILE     every message and event of the runs, a line each\n"
      "  --json FILE      write the rows as JSON\n"
      "partial allreduce rounds instead of collectives:\n"
      "  --modes LIST     solo, majority, quorum:K, sync, adaptive, deadline:T (T a duration or "
      "auto)\n"
      "  --stragglers S   ranks drawn per step: a count, or a share of P with %% [1%%]\n"
      "  --delay-steps D  what a drawn rank computes more, in steps [10]\n"
      "  --compute-us C   every rank's compute per step [100]\n"
      "  --steps N        steps per run [20]\n"
      "  --result-depth N rounds a rank may hold unreleased (PartialOptions) [4]\n"
      "  --seed S         the draws' seed [1]\n"
      "  --activation     instead: how long one rank's post takes to activate the round on\n"
      "                   every rank, per P, against (log2 P + 1) L\n"
      "the schedule explorer instead (partial-allreduce invariants under drawn schedules):\n"
      "  --explore S[:N]  seeds S .. S+N-1 [N = 1]; -v prints every seed's case\n");
}

bool parse_size(const std::string& text, uint64_t* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || v < 0) return false;
  uint64_t mult = 1;
  const std::string unit(end);
  if (unit == "K" || unit == "k" || unit == "KiB")
    mult = 1ull << 10;
  else if (unit == "M" || unit == "MiB")
    mult = 1ull << 20;
  else if (unit == "G" || unit == "GiB")
    mult = 1ull << 30;
  else if (!unit.empty() && unit != "B")
    return false;
  *out = static_cast<uint64_t>(v * static_cast<double>(mult));
  return true;
}

template <typename T, typename Parse>
bool parse_list(const char* text, std::vector<T>* out, Parse parse) {
  out->clear();
  std::string s(text);
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string item =
        s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    T v{};
    if (!parse(item, &v)) return false;
    out->push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return !out->empty();
}

int write_json(const std::string& path, const std::string& rows) {
  if (path.empty()) return 0;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "eagercomm-sim: cannot write %s\n", path.c_str());
    return 1;
  }
  std::fprintf(f, "[%s]\n", rows.c_str());
  std::fclose(f);
  return 0;
}

struct PartialTable {
  std::vector<std::string> modes;
  std::string stragglers = "1%";
  double delay_steps = 10, compute_us = 100;
  int steps = 20;
  uint64_t seed = 1;
  uint32_t result_depth = 4;
  std::FILE* trace = nullptr;
};

// A world of P ranks on `model`, or why it cannot be made.
Result<std::unique_ptr<SimWorld>> new_world(int P, const LogGP& model, std::FILE* trace,
                                            uint64_t elide = UINT64_MAX,
                                            std::map<std::string, std::string> config = {}) {
  WorldOptions wo;
  wo.ranks = P;
  wo.link = model;
  wo.elide_bytes = elide;
  wo.config = std::move(config);
  EC_ASSIGN_OR_RETURN(std::unique_ptr<SimWorld> world, SimWorld::create(wo));
  world->network().set_trace(trace);
  return world;
}

// The same, null with the reason on stderr.
std::unique_ptr<SimWorld> make_world(int P, const LogGP& model, std::FILE* trace,
                                     uint64_t elide = UINT64_MAX,
                                     std::map<std::string, std::string> config = {}) {
  Result<std::unique_ptr<SimWorld>> world = new_world(P, model, trace, elide, std::move(config));
  if (!world.ok()) {
    std::fprintf(stderr, "eagercomm-sim: P=%d: %s\n", P, world.status().to_string().c_str());
    return nullptr;
  }
  return std::move(world).value();
}

int stragglers_of(const std::string& text, int P) {
  if (!text.empty() && text.back() == '%') {
    const double share = std::atof(text.c_str()) / 100.0;
    return std::max(share > 0 ? 1 : 0, static_cast<int>(std::lround(share * P)));
  }
  return std::min(std::atoi(text.c_str()), P);
}

Result<PartialResult> run_partial_in_new_world(int P, const LogGP& model, std::FILE* trace,
                                               const PartialRun& run) {
  // The caller reports a failure, the world's included, once.
  EC_ASSIGN_OR_RETURN(std::unique_ptr<SimWorld> world, new_world(P, model, trace));
  return run_partial(*world, run);
}

// The partial allreduce table: one row per P, size and mode.
int partial_table(const PartialTable& t, const std::vector<int>& ranks,
                  const std::vector<uint64_t>& sizes, const LogGP& model, std::string* rows) {
  std::printf("# %6s %10s %12s %6s %11s %11s %7s %11s %6s %6s %5s %8s %5s\n", "ranks", "bytes",
              "mode", "strag", "fast (us)", "alone (us)", "ratio", "slow (us)", "fresh", "stale",
              "max", "wall (s)", "conns");
  for (int P : ranks) {
    for (uint64_t bytes : sizes) {
      for (const std::string& mode : t.modes) {
        PartialRun run;
        run.mode = mode;
        run.bytes = bytes;
        run.steps = t.steps;
        run.compute_us = t.compute_us;
        run.delay_us = t.delay_steps * t.compute_us;
        run.seed = t.seed;
        run.result_depth = t.result_depth;
        // Each run in a world of its own: runs do not depend on each other, and at P = 4096 the
        // mailbox pages one run touched (about 13 GB) would stay resident under the next.
        Result<PartialResult> alone = run_partial_in_new_world(P, model, t.trace, run);
        run.stragglers = stragglers_of(t.stragglers, P);
        Result<PartialResult> with =
            alone.ok() ? run_partial_in_new_world(P, model, t.trace, run) : alone;
        if (!with.ok()) {
          std::fprintf(stderr, "eagercomm-sim: P=%d, %s: %s\n", P, mode.c_str(),
                       with.status().to_string().c_str());
          return 1;
        }
        const PartialResult& a = alone.value();
        const PartialResult& w = with.value();
        // What a step costs beyond the compute, relative to the run without stragglers.
        const double ratio = a.fast_step_us > 0 ? w.fast_step_us / a.fast_step_us : 0;
        std::printf("  %6d %10llu %12s %6d %11.1f %11.1f %7.3f %11.1f %6.3f %6.2f %5d %8.2f %5u\n",
                    P, static_cast<unsigned long long>(bytes), mode.c_str(), run.stragglers,
                    w.fast_step_us, a.fast_step_us, ratio, w.slow_step_us, w.fresh_fraction,
                    w.stale_mean, w.stale_max, a.wall_s + w.wall_s, w.connections);
        std::fflush(stdout);
        char row[640];
        std::snprintf(row, sizeof(row),
                      "%s{\"ranks\": %d, \"bytes\": %llu, \"mode\": \"%s\", \"stragglers\": %d, "
                      "\"delay_us\": %.1f, \"compute_us\": %.1f, \"fast_step_us\": %.3f, "
                      "\"alone_step_us\": %.3f, \"ratio\": %.4f, \"slow_step_us\": %.3f, "
                      "\"fresh_fraction\": %.4f, \"stale_mean\": %.4f, \"stale_max\": %d, "
                      "\"result_depth\": %u, \"rounds\": %llu, \"messages\": %llu, "
                      "\"wall_s\": %.3f, \"connections\": %u}",
                      rows->empty() ? "" : ",\n ", P, static_cast<unsigned long long>(bytes),
                      mode.c_str(), run.stragglers, run.delay_us, run.compute_us, w.fast_step_us,
                      a.fast_step_us, ratio, w.slow_step_us, w.fresh_fraction, w.stale_mean,
                      w.stale_max, run.result_depth, static_cast<unsigned long long>(w.rounds),
                      static_cast<unsigned long long>(w.network.messages), a.wall_s + w.wall_s,
                      w.connections);
        *rows += row;
      }
    }
  }
  return 0;
}

const std::vector<uint64_t> kCollectiveSizes{8, 1024, 64 * 1024, 1 << 20};
const std::vector<uint64_t> kPartialSizes{4096};

struct CollectiveTable {
  std::string coll = "allreduce", algo = "auto", link = "hdr";
  int iters = 3;
  uint64_t elide = 64ull << 20;
  bool show_calls = false;
  std::FILE* trace = nullptr;
};

// The collective table: one row per P and size.
int collective_table(const CollectiveTable& t, const std::vector<int>& ranks,
                     const std::vector<uint64_t>& sizes, const LogGP& model, std::string* rows) {
  std::printf("# eagercomm-sim: %s on %s (%s)\n", t.coll.c_str(), t.link.c_str(),
              model.describe().c_str());
  std::printf("# %6s %12s %6s %12s %12s %7s %12s %10s %8s %6s %5s\n", "ranks", "bytes", "algo",
              "first (us)", "model (us)", "ratio", "mean (us)", "msgs/call", "wall (s)", "wrong",
              "conns");
  for (int P : ranks) {
    std::map<std::string, std::string> config;
    if (t.algo != "auto") config["EAGERCOMM_ALLREDUCE_ALGO"] = t.algo;
    // Vectors up to --elide run in a world that copies everything; larger ones in a world that
    // delivers only a message's first page (headers), so that nothing is reduced either: a
    // 100 MiB ring at P = 1024 then costs the event loop, not 200 GiB of reductions. One
    // simulated network at a time: a world is made again when the kind changes.
    std::unique_ptr<SimWorld> world;
    bool world_elides = false;
    for (uint64_t bytes : sizes) {
      const bool elides = bytes > t.elide;
      if (!world || elides != world_elides) {
        world.reset();
        world = make_world(P, model, t.trace, elides ? SimNetwork::kElidedKeepBytes : UINT64_MAX,
                           config);
        world_elides = elides;
      }
      if (!world) return 1;
      if (t.trace)
        std::fprintf(t.trace, "# P=%d, %llu bytes\n", P, static_cast<unsigned long long>(bytes));
      CollectiveRun run;
      run.collective = t.coll;
      run.bytes = bytes;
      run.iters = t.iters;
      Result<CollectiveResult> r = run_collective(*world, run);
      if (!r.ok()) {
        std::fprintf(stderr, "eagercomm-sim: P=%d, %llu bytes: %s\n", P,
                     static_cast<unsigned long long>(bytes), r.status().to_string().c_str());
        return 1;
      }
      // Which algorithm ran: the library's own choice for the sim transport (no mapped memory,
      // no small boxes).
      const Config& cfg = world->config();
      const bool rd = t.coll == "allreduce" &&
                      detail::choose_allreduce(cfg, P, bytes, cfg.slot_bytes - kSlotHeaderBytes,
                                               false, 0) == detail::Algo::kRecursiveDoubling;
      const std::string used = t.coll != "allreduce" ? "-" : rd ? "rd" : "ring";
      double model_us = 0;
      if (t.coll == "allreduce") {
        model_us =
            (rd ? rd_allreduce_ns(model, P, bytes) : ring_allreduce_ns(model, P, bytes)) / 1e3;
      }
      const CollectiveResult& x = r.value();
      const double ratio = model_us > 0 ? x.first_us / model_us : 0;
      const double msgs = static_cast<double>(x.network.messages) / t.iters;
      std::printf("  %6d %12llu %6s %12.2f %12.2f %7.3f %12.2f %10.0f %8.2f %6s %5u\n", P,
                  static_cast<unsigned long long>(bytes), used.c_str(), x.first_us, model_us, ratio,
                  x.time_us, msgs, x.wall_s, x.checked ? std::to_string(x.wrong).c_str() : "-",
                  x.connections);
      if (t.show_calls) {
        std::printf("#   calls end at (us):");
        for (double t : x.call_end_us) std::printf(" %.1f", t);
        uint64_t spills = 0, unexpected = 0;
        for (int q = 0; q < P; ++q) {
          const CommunicatorStats st = world->comm(q).stats();
          spills += st.spills;
          unexpected += st.unexpected_messages;
        }
        std::printf("\n#   so far, all ranks: %llu spills, %llu unexpected messages\n",
                    static_cast<unsigned long long>(spills),
                    static_cast<unsigned long long>(unexpected));
      }
      std::fflush(stdout);
      char row[512];
      std::snprintf(row, sizeof(row),
                    "%s{\"ranks\": %d, \"bytes\": %llu, \"collective\": \"%s\", \"algo\": \"%s\", "
                    "\"link\": \"%s\", \"first_us\": %.4f, \"mean_us\": %.4f, \"model_us\": %.4f, "
                    "\"ratio\": %.4f, "
                    "\"messages_per_call\": %.1f, \"wall_s\": %.3f, \"checked\": %s, \"wrong\": "
                    "%llu, \"connections\": %u}",
                    rows->empty() ? "" : ",\n ", P, static_cast<unsigned long long>(bytes),
                    t.coll.c_str(), used.c_str(), t.link.c_str(), x.first_us, x.time_us, model_us,
                    ratio, msgs, x.wall_s, x.checked ? "true" : "false",
                    static_cast<unsigned long long>(x.wrong), x.connections);
      *rows += row;
      if (x.checked && x.wrong) {
        std::fprintf(stderr, "eagercomm-sim: P=%d, %llu bytes: %llu wrong elements\n", P,
                     static_cast<unsigned long long>(bytes),
                     static_cast<unsigned long long>(x.wrong));
        return 1;
      }
    }
  }
  return 0;
}

// --activation: one row per P: how long after one rank's post every rank has entered the round,
// against (log2 P + 1) L (issue 21's target), from rank 0 and from rank P - 1 (the flood is the
// same relative to its root; the round's data messages, which may reach a rank ahead of its
// activation, are not).
int activation_table(const std::vector<int>& ranks, uint64_t bytes, const LogGP& model,
                     std::FILE* trace, std::string* rows) {
  std::printf("# eagercomm-sim: activation of a solo round (%s), %llu bytes, from rank 0 and P-1\n",
              model.describe().c_str(), static_cast<unsigned long long>(bytes));
  std::printf("# %6s %6s %11s %11s %11s %11s %7s\n", "ranks", "log2P", "last (us)", "mean (us)",
              "from P-1", "bound (us)", "ratio");
  for (int P : ranks) {
    ActivationResult from[2];
    for (int i = 0; i < 2; ++i) {
      // A world each: at P = 4096 a second set of objects in the same world did not fit 24 GiB.
      std::unique_ptr<SimWorld> world = make_world(P, model, trace);
      if (!world) return 1;
      Result<ActivationResult> a = run_activation(*world, bytes, i == 0 ? 0 : P - 1);
      if (!a.ok()) {
        std::fprintf(stderr, "eagercomm-sim: P=%d: %s\n", P, a.status().to_string().c_str());
        return 1;
      }
      from[i] = a.value();
    }
    const double log2p = std::log2(static_cast<double>(P));
    const double bound_us = (std::ceil(log2p) + 1) * model.L_ns / 1e3;
    const double worst_us = std::max(from[0].last_us, from[1].last_us);
    std::printf("  %6d %6.1f %11.2f %11.2f %11.2f %11.2f %7.3f\n", P, log2p, from[0].last_us,
                from[0].mean_us, from[1].last_us, bound_us, worst_us / bound_us);
    std::fflush(stdout);
    char row[400];
    std::snprintf(row, sizeof(row),
                  "%s{\"ranks\": %d, \"bytes\": %llu, \"activation_last_us\": %.4f, "
                  "\"activation_mean_us\": %.4f, \"activation_last_from_last_rank_us\": %.4f, "
                  "\"bound_us\": %.4f}",
                  rows->empty() ? "" : ",\n ", P, static_cast<unsigned long long>(bytes),
                  from[0].last_us, from[0].mean_us, from[1].last_us, bound_us);
    *rows += row;
  }
  return 0;
}

// --explore: one line per broken invariant, a summary; 1 if any seed broke one.
int explore_seeds(uint64_t first, uint64_t count, bool verbose) {
  uint64_t failed = 0, died = 0, rounds = 0;
  quiet_explorer_logs();
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t seed = first; seed < first + count; ++seed) {
    const ExploreCase c = draw_case(seed);
    if (verbose)
      std::printf("seed %llu: %s\n", static_cast<unsigned long long>(seed), c.describe().c_str());
    const Result<ExploreOutcome> r = explore(c);
    if (!r.ok()) {
      ++failed;
      std::printf("FAILED %s\n", r.status().message().c_str());
      continue;
    }
    died += r.value().died;
    rounds += r.value().rounds;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "# explored seeds %llu .. %llu: %llu broke an invariant, %llu with a death, %llu "
      "rounds, %.1f s\n",
      static_cast<unsigned long long>(first), static_cast<unsigned long long>(first + count - 1),
      static_cast<unsigned long long>(failed), static_cast<unsigned long long>(died),
      static_cast<unsigned long long>(rounds), wall);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks{2, 4, 8, 16, 32, 64};
  std::vector<uint64_t> sizes;  // --bytes; else each table's default
  CollectiveTable table;
  std::string json;
  std::string trace_path;
  PartialTable partial;
  uint64_t explore_first = 0, explore_count = 0;
  bool verbose = false, activation = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto bad = [&](const char* what) {
      std::fprintf(stderr, "eagercomm-sim: %s: '%s'\n", what, v ? v : "(missing)");
      return 2;
    };
    if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a == "--ranks" && v) {
      if (!parse_list<int>(v, &ranks, [](const std::string& t, int* o) {
            char* e = nullptr;
            const long n = std::strtol(t.c_str(), &e, 10);
            *o = static_cast<int>(n);
            return e != t.c_str() && *e == 0 && n >= 1 && n <= 65536;
          }))
        return bad("--ranks takes world sizes 1..65536, comma-separated");
    } else if (a == "--bytes" && v) {
      if (!parse_list<uint64_t>(v, &sizes,
                                [](const std::string& t, uint64_t* o) { return parse_size(t, o); }))
        return bad("--bytes takes sizes");
    } else if (a == "--coll" && v) {
      table.coll = v;
    } else if (a == "--algo" && v) {
      table.algo = v;
      if (table.algo != "auto" && table.algo != "ring" && table.algo != "rd")
        return bad("--algo is auto, ring or rd");
    } else if (a == "--link" && v) {
      table.link = v;
    } else if (a == "--iters" && v) {
      table.iters = std::atoi(v);
      if (table.iters < 1) return bad("--iters takes a count >= 1");
    } else if (a == "--elide" && v) {
      if (!parse_size(v, &table.elide)) return bad("--elide takes a size");
    } else if (a == "--modes" && v) {
      if (!parse_list<std::string>(v, &partial.modes, [](const std::string& t, std::string* o) {
            *o = t;
            return parse_partial_mode(t).ok();
          }))
        return bad("--modes takes solo, majority, quorum:K, sync, adaptive, deadline:T");
    } else if (a == "--stragglers" && v) {
      partial.stragglers = v;
      if (partial.stragglers.empty() || std::atof(v) < 0) return bad("--stragglers takes N or S%");
    } else if (a == "--delay-steps" && v) {
      partial.delay_steps = std::atof(v);
      if (partial.delay_steps < 0) return bad("--delay-steps takes a number >= 0");
    } else if (a == "--compute-us" && v) {
      partial.compute_us = std::atof(v);
      if (partial.compute_us <= 0) return bad("--compute-us takes a number > 0");
    } else if (a == "--steps" && v) {
      partial.steps = std::atoi(v);
      if (partial.steps < 1) return bad("--steps takes a count >= 1");
    } else if (a == "--result-depth" && v) {
      const int d = std::atoi(v);
      if (d < 1 || d > 1024) return bad("--result-depth takes 1 .. 1024");
      partial.result_depth = static_cast<uint32_t>(d);
    } else if (a == "--seed" && v) {
      partial.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--explore" && v) {
      char* end = nullptr;
      explore_first = std::strtoull(v, &end, 10);
      explore_count = 1;
      if (end != v && *end == ':') explore_count = std::strtoull(end + 1, &end, 10);
      if (end == v || *end != 0 || explore_count < 1) return bad("--explore takes SEED[:COUNT]");
    } else if (a == "--activation") {
      activation = true;
      continue;
    } else if (a == "-v") {
      verbose = true;
      continue;
    } else if (a == "--trace" && v) {
      trace_path = v;
    } else if (a == "--calls") {
      table.show_calls = true;
      continue;
    } else if (a == "--json" && v) {
      json = v;
    } else {
      std::fprintf(stderr, "eagercomm-sim: unknown option or missing value: %s\n", a.c_str());
      usage();
      return 2;
    }
    ++i;
  }
  if (explore_count > 0) return explore_seeds(explore_first, explore_count, verbose);
  std::FILE* trace = nullptr;
  if (!trace_path.empty() && !(trace = std::fopen(trace_path.c_str(), "w"))) {
    std::fprintf(stderr, "eagercomm-sim: cannot write %s\n", trace_path.c_str());
    return 1;
  }
  partial.trace = table.trace = trace;
  Result<LogGP> model = loggp_parse(table.link);
  if (!model.ok()) {
    std::fprintf(stderr, "eagercomm-sim: %s\n", model.status().message().c_str());
    return 2;
  }
  std::string rows;
  if (activation) {
    const int rc =
        activation_table(ranks, sizes.empty() ? 4096 : sizes.front(), model.value(), trace, &rows);
    return rc != 0 ? rc : write_json(json, rows);
  }
  if (!partial.modes.empty()) {
    std::printf(
        "# eagercomm-sim: partial allreduce on %s (%s), %d steps of %.0f us, stragglers "
        "%s computing %.0f steps more, result depth %u, seed %llu\n",
        table.link.c_str(), model.value().describe().c_str(), partial.steps, partial.compute_us,
        partial.stragglers.c_str(), partial.delay_steps, partial.result_depth,
        static_cast<unsigned long long>(partial.seed));
    const int rc =
        partial_table(partial, ranks, sizes.empty() ? kPartialSizes : sizes, model.value(), &rows);
    if (rc != 0) return rc;
    return write_json(json, rows);
  }
  const int rc = collective_table(table, ranks, sizes.empty() ? kCollectiveSizes : sizes,
                                  model.value(), &rows);
  return rc != 0 ? rc : write_json(json, rows);
}
