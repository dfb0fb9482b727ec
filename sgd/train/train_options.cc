#include "sgd/train/train_options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>

#include "sgd/lr_schedule.h"

namespace eagercomm::sgd {
namespace {

Status bad(const std::string& option, const std::string& value, const std::string& why) {
  return make_status(StatusCode::kInvalidArgument, "eagercomm-train: %s '%s': %s", option.c_str(),
                     value.c_str(), why.c_str());
}

// The comma-separated items of `value` ("" is one empty item).
std::vector<std::string> split_commas(const std::string& value) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= value.size()) {
    size_t end = value.find(',', at);
    if (end == std::string::npos) end = value.size();
    out.push_back(value.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

Result<int64_t> to_int(const std::string& option, const std::string& value, int64_t lo,
                       int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || errno != 0 || *end != '\0') return bad(option, value, "not an integer");
  if (v < lo || v > hi) {
    return make_status(StatusCode::kInvalidArgument,
                       "eagercomm-train: %s '%s': out of range [%lld, %lld]", option.c_str(),
                       value.c_str(), static_cast<long long>(lo), static_cast<long long>(hi));
  }
  return static_cast<int64_t>(v);
}

Result<double> to_double(const std::string& option, const std::string& value, double lo,
                         double hi) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || errno != 0 || *end != '\0' || !std::isfinite(v)) {
    return bad(option, value, "not a number");
  }
  if (v < lo || v > hi) {
    return make_status(StatusCode::kInvalidArgument,
                       "eagercomm-train: %s '%s': out of range [%g, %g]", option.c_str(),
                       value.c_str(), lo, hi);
  }
  return v;
}

Result<std::vector<PartialMode>> to_modes(const std::string& option, const std::string& value) {
  std::vector<PartialMode> out;
  for (const std::string& item : split_commas(value)) {
    Result<PartialMode> m = parse_partial_mode(item);
    if (!m.ok()) {
      return bad(option, value,
                 "modes are sync, solo, majority, quorum:K, adaptive and deadline:T (T a duration "
                 "such as 5ms, or auto; comma-separated)");
    }
    // The report aggregates the runs of a mode over the seeds: a mode listed twice would merge.
    for (const PartialMode& seen : out) {
      if (seen.name() == m.value().name()) {
        return bad(option, value, "mode " + seen.name() + " is listed twice");
      }
    }
    out.push_back(m.value());
  }
  return out;
}

Result<std::vector<uint64_t>> to_seeds(const std::string& option, const std::string& value) {
  if (value.empty()) return bad(option, value, "expected seeds, comma-separated (e.g. 1,2,3)");
  std::vector<uint64_t> out;
  for (const std::string& item : split_commas(value)) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    // strtoull accepts a sign ("-1" wraps around): digits only.
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || errno != 0 ||
        *end != '\0' || v > static_cast<unsigned long long>(INT64_MAX)) {
      return bad(option, value,
                 "'" + item + "' is not a seed (an integer in [0, " + std::to_string(INT64_MAX) +
                     "]; seeds are comma-separated)");
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      return bad(option, value, "seed " + item + " is listed twice");
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::string train_usage() {
  return R"(usage: eagercomm-train [options]     (start with eagercomm-run -n P, mpirun or torchrun)
  --model M          cnn | resnet20 (Fashion-MNIST) | lstm (variable-length sequences) [cnn]
  --mode LIST        sync,solo,majority,quorum:K,adaptive,deadline:T (T: 5ms, auto...),
                     trained one after the other [solo]
  --epochs N         epochs per mode [1]
  --eager-epochs N   epochs of the eager modes, to measure time to sync's accuracy when they
                     need more; accuracy at equal epochs is read after --epochs [--epochs]
  --stop-at-target   eager modes stop once past --epochs at sync's accuracy (sync first)
  --batch B          samples per rank and step [64]
  --lr X             base learning rate [0.05]
  --momentum X       [0.9]           --weight-decay X   [5e-4]
  --eager-momentum X momentum of the eager modes [--momentum]
  --staleness R      none | momentum | rate | step: how rounds correct for stale gradients
                     [momentum]
  --average X        evaluate the parameters' exponential average over rounds, decay X [0: off]
  --solo-speedup X   adaptive: run solo rounds when they promise X times faster epochs [1.3, 1..10]
  --warmup N         linear warm-up over N rounds [0]
  --milestones R,..  multiply the rate by --gamma at these rounds []   --gamma X [0.1]
  --sync-every N     every N-th round synchronous [0: never]
  --imbalance K:D    each step K ranks, drawn by a shared PRNG, sleep D ms [none]
  --imbalance linear:D  rank r sleeps r * D ms every step
  --on-failure F     fail | continue: whether the survivors of a dead or hung rank go on
                     training without it (eagercomm-run --keep-going) [fail]
  --die-at R:S       fault injection: rank R SIGKILLs itself before its step S of the run
  --seed S           model initialisation, shuffling, imbalance draws; the lstm data [1]
  --seeds S,..       train every mode once per seed, report the spread [--seed]
  --evals-per-epoch K  test evaluations per epoch, equally spaced, the last at its end [1]
  --train-limit N    use the first N training samples [all]
  --test-limit N     evaluate on the first N test samples [all]
  --data DIR         Fashion-MNIST directory [Debian's dataset-fashion-mnist]
  --threads T        torch threads per rank [1]
  --log-every N      progress line on rank 0 every N steps [50; 0: none]
  --json FILE        write the report as JSON (- for standard output)
  --curve FILE       write test accuracy against wall-clock time as CSV (for plotting)
The table compares modes by time to accuracy: for each seed the target is its sync run's final
accuracy (when sync is among the modes); it also compares their accuracy at the training time of
the seed's shortest run (interpolated between evaluations). Training time excludes evaluation.
)";
}

Result<TrainOptions> parse_train_options(int argc, char** argv) {
  TrainOptions o;
  using Setter = std::function<Status(const std::string&, const std::string&)>;
  auto integer = [](auto* field, int64_t lo, int64_t hi) -> Setter {
    return [field, lo, hi](const std::string& opt, const std::string& v) -> Status {
      EC_ASSIGN_OR_RETURN(int64_t x, to_int(opt, v, lo, hi));
      *field = static_cast<std::remove_pointer_t<decltype(field)>>(x);
      return Status::Ok();
    };
  };
  auto real = [](double* field, double lo, double hi) -> Setter {
    return [field, lo, hi](const std::string& opt, const std::string& v) -> Status {
      EC_ASSIGN_OR_RETURN(*field, to_double(opt, v, lo, hi));
      return Status::Ok();
    };
  };
  auto text = [](std::string* field) -> Setter {
    return [field](const std::string&, const std::string& v) -> Status {
      *field = v;
      return Status::Ok();
    };
  };
  const int64_t big = int64_t{1} << 40;
  const std::map<std::string, Setter> setters = {
      {"--model",
       [&o](const std::string& opt, const std::string& v) -> Status {
         if (v != "cnn" && v != "resnet20" && v != "lstm") {
           return bad(opt, v, "models are cnn, resnet20 and lstm");
         }
         o.model = v;
         return Status::Ok();
       }},
      {"--mode",
       [&o](const std::string& opt, const std::string& v) -> Status {
         EC_ASSIGN_OR_RETURN(o.modes, to_modes(opt, v));
         return Status::Ok();
       }},
      {"--epochs", integer(&o.epochs, 1, 100000)},
      {"--eager-epochs", integer(&o.eager_epochs, 1, 100000)},

      {"--batch", integer(&o.batch, 1, 1 << 20)},
      {"--lr", real(&o.lr, 1e-12, 1e6)},
      {"--momentum", real(&o.momentum, 0.0, 0.999999)},
      {"--eager-momentum", real(&o.eager_momentum, 0.0, 0.999999)},
      {"--weight-decay", real(&o.weight_decay, 0.0, 1.0)},
      {"--warmup", integer(&o.warmup_rounds, 0, big)},
      {"--milestones",
       [&o](const std::string&, const std::string& v) -> Status {
         EC_ASSIGN_OR_RETURN(o.milestones, parse_milestones(v));
         return Status::Ok();
       }},
      {"--gamma", real(&o.gamma, 1e-12, 1.0)},
      {"--sync-every", integer(&o.sync_every, 0, 1 << 30)},
      {"--imbalance",
       [&o](const std::string& opt, const std::string& v) -> Status {
         const size_t colon = v.find(':');
         if (colon == std::string::npos) {
           return bad(opt, v, "expected K:D (ranks:milliseconds) or linear:D");
         }
         if (v.substr(0, colon) == "linear") {
           EC_ASSIGN_OR_RETURN(o.imbalance_ms, to_double(opt, v.substr(colon + 1), 0.0, 1e6));
           o.imbalance_linear = true;
           o.imbalance_k = 0;
           return Status::Ok();
         }
         o.imbalance_linear = false;
         EC_ASSIGN_OR_RETURN(int64_t k, to_int(opt, v.substr(0, colon), 0, 1 << 20));
         EC_ASSIGN_OR_RETURN(o.imbalance_ms, to_double(opt, v.substr(colon + 1), 0.0, 1e6));
         o.imbalance_k = static_cast<int>(k);
         return Status::Ok();
       }},
      {"--on-failure",
       [&o](const std::string& opt, const std::string& v) -> Status {
         Result<OnFailure> failure = parse_on_failure(v);
         if (!failure.ok()) return bad(opt, v, "expected fail or continue");
         o.on_failure = failure.value();
         return Status::Ok();
       }},
      {"--die-at",
       [&o](const std::string& opt, const std::string& v) -> Status {
         const size_t colon = v.find(':');
         if (colon == std::string::npos) return bad(opt, v, "expected R:S (rank:step)");
         EC_ASSIGN_OR_RETURN(int64_t r, to_int(opt, v.substr(0, colon), 0, 1 << 20));
         EC_ASSIGN_OR_RETURN(int64_t step, to_int(opt, v.substr(colon + 1), 0, INT64_MAX));
         o.die_rank = static_cast<int>(r);
         o.die_step = static_cast<uint64_t>(step);
         return Status::Ok();
       }},
      {"--seed", integer(&o.seed, 0, INT64_MAX)},
      {"--seeds",
       [&o](const std::string& opt, const std::string& v) -> Status {
         EC_ASSIGN_OR_RETURN(o.seeds, to_seeds(opt, v));
         return Status::Ok();
       }},
      {"--evals-per-epoch", integer(&o.evals_per_epoch, 1, 1 << 20)},
      {"--staleness",
       [&o](const std::string& opt, const std::string& v) -> Status {
         Result<StalenessRule> rule = parse_staleness_rule(v);
         if (!rule.ok()) return bad(opt, v, "rules are none, momentum, rate and step");
         o.staleness = rule.value();
         return Status::Ok();
       }},
      {"--average", real(&o.average_decay, 0.0, 0.999999)},
      {"--solo-speedup", real(&o.solo_speedup, 1.0, PartialOptions::kMaxSoloSpeedup)},
      {"--json", text(&o.json)},
      {"--curve", text(&o.curve)},
      {"--data", text(&o.data_dir)},
      {"--train-limit", integer(&o.train_limit, 0, big)},
      {"--test-limit", integer(&o.test_limit, 0, big)},
      {"--threads", integer(&o.threads, 1, 1024)},
      {"--log-every", integer(&o.log_every, 0, 1 << 30)},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "--stop-at-target") {  // a flag: takes no value
      o.stop_at_target = true;
      continue;
    }
    std::string value;
    bool have_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      have_value = true;
    }
    auto it = setters.find(arg);
    if (it == setters.end()) {
      return make_status(StatusCode::kInvalidArgument,
                         "eagercomm-train: unknown option '%s' (try --help)", arg.c_str());
    }
    if (!have_value) {
      if (i + 1 >= argc) {
        return make_status(StatusCode::kInvalidArgument, "eagercomm-train: %s needs a value",
                           arg.c_str());
      }
      value = argv[++i];
    }
    EC_RETURN_IF_ERROR(it->second(arg, value));
  }
  return o;
}

}  // namespace eagercomm::sgd
