#include "bench/bench_options.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "collectives/partial_allreduce.h"
#include "runtime/config.h"

namespace eagercomm::bench {

const char* pattern_name(DelayPattern p) {
  switch (p) {
    case DelayPattern::kFixed:
      return "fixed";
    case DelayPattern::kRandom:
      return "random";
    case DelayPattern::kLinear:
      return "linear";
    case DelayPattern::kExp:
      return "exp";
  }
  return "?";
}

const char* device_name(BufferDevice d) { return d == BufferDevice::kCuda ? "cuda" : "host"; }

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kBarrier:
      return "barrier";
  }
  return "?";
}

void print_usage() {
  std::printf(
      "usage: eagercomm-bench [options]\n"
      "  -p, --ranks N         in-process ranks (threads) [4]\n"
      "      --world W         auto | threads | env | mpi: where ranks come from [auto: mpi\n"
      "                        under mpirun, env under eagercomm-run/torchrun/srun, else threads]\n"
      "      --compare LIST    also time these libraries' allreduce on the same processes and\n"
      "                        buffers: mpi, gloo (need --world mpi, i.e. mpirun), nccl (needs\n"
      "                        --device cuda and one process per rank)\n"
      "      --device D        host | cuda: where the collectives' buffers live [host]\n"
      "      --p2p             transport write+notify latency and bandwidth between ranks 0, 1\n"
      "      --window N        writes in flight in the --p2p bandwidth test [64]\n"
      "      --consume         --p2p: the receiver reads the payload before it answers\n"
      "      --coll NAME       allreduce | broadcast | allgather | barrier [allreduce]\n"
      "  -b, --minbytes SIZE   smallest message [8]\n"
      "  -e, --maxbytes SIZE   largest message [64M]\n"
      "  -f, --stepfactor F    multiply the size by F each step [2]\n"
      "  -n, --iters N         timed iterations per size [20]\n"
      "  -w, --warmup_iters N  untimed iterations per size [5]\n"
      "  -c, --check 0|1       check every result [1]\n"
      "  -d, --datatype T      f32 f64 f16 bf16 i32 i64 (or float, double, half, ...) [f32]\n"
      "  -o, --op OP           sum | min | max [sum]\n"
      "  -r, --root R          broadcast root [0]\n"
      "  -I, --inplace 0|1     also measure in place [1]\n"
      "      --json FILE       also write the results as JSON (\"-\": to stdout, no table)\n"
      "imbalance mode (partial collectives vs the full allreduce, under injected delays):\n"
      "      --imbalance       run it (defaults: -b 1M -e 1M -n 50 -w 5)\n"
      "      --delay-ms D[,D]  injected delay(s) in ms [20]\n"
      "      --delayed K       ranks delayed per iteration [1]\n"
      "      --compute-ms C    every rank sleeps C ms per iteration before the delay [0]\n"
      "      --pattern P       fixed | random | linear | exp [fixed]\n"
      "      --modes LIST      of full, solo, majority, quorum, quorum:K, sync, deadline:T "
      "[full,solo,majority,quorum]\n"
      "      --seed N          shared PRNG seed [1]\n"
      "      --result-depth N  rounds a rank may hold before it holds the others back [16]\n"
      "  -h, --help\n"
      "SIZE accepts 8, 4K, 64M, 1G (binary multiples). Configuration: EAGERCOMM_* variables\n"
      "(see eagercomm-info).\n");
}

namespace {

Result<long> parse_int(std::string_view flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi) {
    return make_status(StatusCode::kInvalidArgument, "%.*s: '%s' is not an integer in [%ld, %ld]",
                       static_cast<int>(flag.size()), flag.data(), text, lo, hi);
  }
  return v;
}

}  // namespace

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == text.npos ? text.size() : comma;
    out.emplace_back(text.substr(start, end - start));
    if (comma == text.npos) break;
    start = comma + 1;
  }
  return out;
}

Result<Options> parse_options(int argc, char** argv, bool* help) {
  Options o;
  *help = false;
  bool sizes_given = false, iters_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      *help = true;
      return o;
    }
    if (flag == "--imbalance") {
      o.imbalance = true;
      continue;
    }
    if (flag == "--p2p") {
      o.p2p = true;
      continue;
    }
    if (flag == "--consume") {
      o.consume = true;
      continue;
    }
    if (i + 1 >= argc) {
      return make_status(StatusCode::kInvalidArgument, "%s: missing value (see --help)", argv[i]);
    }
    const char* v = argv[++i];
    auto sized = [&](size_t* out) -> Status {
      Result<size_t> r = parse_size(v);
      if (!r.ok())
        return Status(r.status().code(), std::string(flag) + ": " + r.status().message());
      *out = r.value();
      return Status::Ok();
    };
    if (flag == "-b" || flag == "--minbytes") {
      EC_RETURN_IF_ERROR(sized(&o.min_bytes));
      sizes_given = true;
    } else if (flag == "-e" || flag == "--maxbytes") {
      EC_RETURN_IF_ERROR(sized(&o.max_bytes));
      sizes_given = true;
    } else if (flag == "-f" || flag == "--stepfactor") {
      char* end = nullptr;
      o.factor = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(o.factor > 1.0)) {
        return make_status(StatusCode::kInvalidArgument, "%s: '%s' must be a number > 1",
                           argv[i - 1], v);
      }
    } else if (flag == "-n" || flag == "--iters") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 1, 100000000));
      o.iters = static_cast<int>(n);
      iters_given = true;
    } else if (flag == "-w" || flag == "--warmup_iters") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 0, 100000000));
      o.warmup = static_cast<int>(n);
    } else if (flag == "-c" || flag == "--check") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 0, 1));
      o.check = n != 0;
    } else if (flag == "-I" || flag == "--inplace") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 0, 1));
      o.in_place = n != 0;
    } else if (flag == "-p" || flag == "--ranks") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 1, 1024));
      o.ranks = static_cast<int>(n);
      o.ranks_given = true;
    } else if (flag == "--world") {
      const std::string_view w = v;
      if (w == "auto")
        o.world = WorldKind::kAuto;
      else if (w == "threads")
        o.world = WorldKind::kThreads;
      else if (w == "env")
        o.world = WorldKind::kEnv;
      else if (w == "mpi")
        o.world = WorldKind::kMpi;
      else {
        return make_status(StatusCode::kInvalidArgument,
                           "--world: '%s' is not one of auto|threads|env|mpi", v);
      }
    } else if (flag == "--compare") {
      o.compare = split_list(v);
      for (const std::string& c : o.compare) {
        if (c != "mpi" && c != "gloo" && c != "nccl") {
          return make_status(StatusCode::kInvalidArgument,
                             "--compare: '%s' is not one of mpi, gloo, nccl", c.c_str());
        }
      }
    } else if (flag == "--device") {
      const std::string_view d = v;
      if (d == "host")
        o.device = BufferDevice::kHost;
      else if (d == "cuda")
        o.device = BufferDevice::kCuda;
      else {
        return make_status(StatusCode::kInvalidArgument, "--device: '%s' is not one of host|cuda",
                           v);
      }
    } else if (flag == "--window") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 1, 4096));
      o.window = static_cast<int>(n);
    } else if (flag == "-r" || flag == "--root") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 0, 1023));
      o.root = static_cast<int>(n);
    } else if (flag == "-d" || flag == "--datatype") {
      EC_ASSIGN_OR_RETURN(o.type, parse_dtype(v));
    } else if (flag == "-o" || flag == "--op") {
      EC_ASSIGN_OR_RETURN(o.op, parse_reduce_op(v));
    } else if (flag == "--coll") {
      const std::string_view c = v;
      if (c == "allreduce")
        o.coll = Collective::kAllreduce;
      else if (c == "broadcast")
        o.coll = Collective::kBroadcast;
      else if (c == "allgather")
        o.coll = Collective::kAllgather;
      else if (c == "barrier")
        o.coll = Collective::kBarrier;
      else {
        return make_status(StatusCode::kInvalidArgument,
                           "--coll: '%s' is not one of allreduce|broadcast|allgather|barrier", v);
      }
    } else if (flag == "--json") {
      o.json = v;
    } else if (flag == "--delay-ms") {
      o.delays_ms.clear();
      for (const std::string& d : split_list(v)) {
        char* end = nullptr;
        const double ms = std::strtod(d.c_str(), &end);
        if (d.empty() || *end != '\0' || !(ms >= 0) || ms > 600000) {
          return make_status(StatusCode::kInvalidArgument,
                             "--delay-ms: '%s' is not a delay in ms (0 .. 600000)", d.c_str());
        }
        o.delays_ms.push_back(ms);
      }
    } else if (flag == "--compute-ms") {
      char* end = nullptr;
      const double ms = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(ms >= 0) || ms > 600000) {
        return make_status(StatusCode::kInvalidArgument,
                           "--compute-ms: '%s' is not a time in ms (0 .. 600000)", v);
      }
      o.compute_ms = ms;
    } else if (flag == "--delayed") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 0, 1024));
      o.delayed = static_cast<int>(n);
    } else if (flag == "--pattern") {
      const std::string_view p = v;
      if (p == "fixed")
        o.pattern = DelayPattern::kFixed;
      else if (p == "random")
        o.pattern = DelayPattern::kRandom;
      else if (p == "linear")
        o.pattern = DelayPattern::kLinear;
      else if (p == "exp")
        o.pattern = DelayPattern::kExp;
      else {
        return make_status(StatusCode::kInvalidArgument,
                           "--pattern: '%s' is not one of fixed|random|linear|exp", v);
      }
    } else if (flag == "--modes") {
      o.modes = split_list(v);
      for (const std::string& m : o.modes) {
        if (m != "full" && m != "quorum" && !parse_partial_mode(m).ok()) {
          return make_status(
              StatusCode::kInvalidArgument,
              "--modes: '%s' is not one of full, solo, majority, quorum, deadline:T, "
              "quorum:K, sync",
              m.c_str());
        }
      }
    } else if (flag == "--result-depth") {
      EC_ASSIGN_OR_RETURN(long n, parse_int(flag, v, 1, 1024));
      o.result_depth = static_cast<uint32_t>(n);
    } else if (flag == "--seed") {
      char* end = nullptr;
      o.seed = std::strtoull(v, &end, 10);
      if (*v == '\0' || *end != '\0') {
        return make_status(StatusCode::kInvalidArgument, "--seed: '%s' is not a number", v);
      }
    } else {
      return make_status(StatusCode::kInvalidArgument, "unknown option '%s' (see --help)",
                         argv[i - 1]);
    }
  }
  if (o.imbalance && o.p2p) {
    return Status(StatusCode::kInvalidArgument, "--imbalance and --p2p are separate benchmarks");
  }
  if (!o.compare.empty()) {
    if (o.p2p) return Status(StatusCode::kInvalidArgument, "--compare does not apply to --p2p");
    if (o.coll != Collective::kAllreduce) {
      return Status(StatusCode::kInvalidArgument, "--compare times allreduce only (drop --coll)");
    }
    bool needs_mpi = false, nccl = false;
    for (const std::string& c : o.compare) {
      needs_mpi |= c != "nccl";
      nccl |= c == "nccl";
    }
    // NCCL bootstraps through eagercomm's communicator, so any launcher will do; MPI and Gloo
    // run inside MPI's processes.
    if (needs_mpi) {
      if (o.world == WorldKind::kAuto) o.world = WorldKind::kMpi;
      if (o.world != WorldKind::kMpi) {
        return Status(
            StatusCode::kInvalidArgument,
            "--compare mpi/gloo run under mpirun (--world mpi): they need MPI's processes");
      }
    }
    if (nccl && o.device != BufferDevice::kCuda) {
      return Status(StatusCode::kInvalidArgument,
                    "--compare nccl times GPU buffers: add --device cuda");
    }
    if (nccl && o.world == WorldKind::kThreads) {
      return Status(StatusCode::kInvalidArgument,
                    "--compare nccl needs one process per rank (eagercomm-run -n N or mpirun), "
                    "not --world threads");
    }
  }
  if (o.device == BufferDevice::kCuda && (o.p2p || o.imbalance)) {
    return Status(StatusCode::kInvalidArgument,
                  "--device cuda applies to the collective benchmarks, not --p2p or --imbalance");
  }
  if (o.imbalance) {
    if (!sizes_given) o.min_bytes = o.max_bytes = 1 << 20;
    if (!iters_given) o.iters = 50;
  }
  if (o.consume && !o.p2p) {
    return Status(StatusCode::kInvalidArgument, "--consume applies to --p2p only");
  }
  if (o.p2p && !iters_given) o.iters = 1000;
  if (o.p2p && !sizes_given) o.max_bytes = 4 << 20;
  // Sizes grow by multiplying by -f: from 0 they never would (the size loop ran forever). A
  // barrier has no size.
  if ((o.min_bytes == 0 || o.max_bytes == 0) && o.coll != Collective::kBarrier) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s 0: sizes start at 1 byte (each step multiplies by -f, which 0 never "
                       "leaves)",
                       o.min_bytes == 0 ? "-b" : "-e");
  }
  if (o.min_bytes > o.max_bytes) {
    return make_status(StatusCode::kInvalidArgument, "-b %zu is larger than -e %zu", o.min_bytes,
                       o.max_bytes);
  }
  if (o.ranks_given) EC_RETURN_IF_ERROR(check_for_ranks(o, o.ranks));
  return o;
}

Status check_for_ranks(const Options& o, int ranks) {
  if (o.imbalance && o.delayed > ranks) {
    return make_status(StatusCode::kInvalidArgument, "--delayed %d: there are only %d ranks",
                       o.delayed, ranks);
  }
  if (o.root >= ranks) {
    return make_status(StatusCode::kInvalidArgument, "-r %d: there are only %d ranks", o.root,
                       ranks);
  }
  if (o.p2p && ranks < 2) {
    return make_status(StatusCode::kInvalidArgument, "--p2p needs 2 ranks, the job has %d", ranks);
  }
  return Status::Ok();
}

}  // namespace eagercomm::bench
