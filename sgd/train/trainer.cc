#include "sgd/train/trainer.h"

#include <torch/torch.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <thread>

#include "runtime/log.h"
#include "sgd/data/fashion_mnist.h"
#include "sgd/data/sequence_task.h"
#include "sgd/data/sharding.h"
#include "sgd/eager_sgd.h"
#include "sgd/torch/batches.h"
#include "sgd/torch/flat_parameters.h"
#include "sgd/torch/local_trainer.h"
#include "sgd/torch/models.h"
#include "sgd/train/metrics.h"

namespace eagercomm::sgd {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What the loop trains on: Fashion-MNIST images or the variable-length sequence task.
struct TaskData {
  bool sequences = false;
  Dataset train, test;               // images
  std::optional<SequenceTask> task;  // sequences
  size_t n_train = 0, n_test = 0;
};

Result<TaskData> load_task(const TrainOptions& o) {
  TaskData d;
  if (o.model == "lstm") {
    d.sequences = true;
    SequenceTaskOptions so;
    so.seed = o.seed;  // the data set stays the same over --seeds
    EC_ASSIGN_OR_RETURN(SequenceTask task, make_sequence_task(so));
    d.task.emplace(std::move(task));
    d.n_train = o.train_limit ? o.train_limit : 8192;
    d.n_test = o.test_limit ? o.test_limit : 2048;
    return d;
  }
  EC_ASSIGN_OR_RETURN(d.train, load_fashion_mnist(Split::kTrain, o.data_dir));
  EC_ASSIGN_OR_RETURN(d.test, load_fashion_mnist(Split::kTest, o.data_dir));
  if (o.train_limit && o.train_limit < d.train.n) d.train = subset(d.train, o.train_limit);
  if (o.test_limit && o.test_limit < d.test.n) d.test = subset(d.test, o.test_limit);
  d.n_train = d.train.n;
  d.n_test = d.test.n;
  return d;
}

// One batch as the model takes it. The image batch is a view of `scratch`.
struct Batch {
  torch::Tensor input, lengths, labels;
};

Result<Batch> make_batch(const TaskData& d, bool test, std::span<const size_t> indices,
                         std::vector<float>& scratch, std::vector<int64_t>& labels) {
  Batch b;
  labels.resize(indices.size());
  if (!d.sequences) {
    const Dataset& set = test ? d.test : d.train;
    const size_t image = set.image_size();
    scratch.resize(indices.size() * image);
    for (size_t i = 0; i < indices.size(); ++i) {
      std::copy_n(set.image(indices[i]), image, scratch.data() + i * image);
      labels[i] = set.labels[indices[i]];
    }
    EC_ASSIGN_OR_RETURN(b.input,
                        images_view(scratch.data(), indices.size(), static_cast<int>(set.rows),
                                    static_cast<int>(set.cols)));
  } else {
    std::vector<SequenceSample> samples;
    samples.reserve(indices.size());
    std::vector<SequenceRef> refs;
    for (size_t i = 0; i < indices.size(); ++i) {
      const uint64_t index = test ? kSequenceTestIndexBase + indices[i] : indices[i];
      samples.push_back(d.task->sample(index));
      labels[i] = samples.back().label;
    }
    for (const SequenceSample& s : samples) refs.push_back({s.length, s.features.data()});
    EC_ASSIGN_OR_RETURN(PaddedSequences p,
                        pad_sequences(refs, static_cast<int>(d.task->options().dim)));
    b.input = p.input;
    b.lengths = p.lengths;
  }
  EC_ASSIGN_OR_RETURN(b.labels, labels_to_tensor(labels.data(), labels.size()));
  return b;
}

// Test accuracy over the whole test set, each rank evaluating every size-th sample; identical
// on every rank.
Result<double> evaluate_all(Communicator& comm, Model& model, const TaskData& d) {
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(comm.rank()); i < d.n_test;
       i += static_cast<size_t>(comm.size())) {
    mine.push_back(i);
  }
  int64_t counts[2] = {0, static_cast<int64_t>(mine.size())};
  std::vector<float> scratch;
  std::vector<int64_t> labels;
  const size_t chunk = d.sequences ? 128 : 1000;
  for (size_t at = 0; at < mine.size(); at += chunk) {
    std::span<const size_t> part(mine.data() + at, std::min(chunk, mine.size() - at));
    EC_ASSIGN_OR_RETURN(Batch b, make_batch(d, true, part, scratch, labels));
    Result<double> acc = d.sequences ? evaluate(model, b.input, b.lengths, b.labels, part.size())
                                     : evaluate(model, b.input, b.labels, part.size());
    if (!acc.ok()) return acc.status();
    counts[0] += static_cast<int64_t>(std::llround(acc.value() * static_cast<double>(part.size())));
  }
  EC_RETURN_IF_ERROR(comm.allreduce(counts, counts, 2, DataType::kInt64, ReduceOp::kSum));
  return counts[1] ? static_cast<double>(counts[0]) / static_cast<double>(counts[1]) : 0.0;
}

// BatchNorm running statistics were gathered on each rank's own batches: averaging them makes
// the replicas evaluate (and continue) identically.
Status average_stats(Communicator& comm, FlatParameters& flat) {
  if (flat.stats_count() == 0) return Status::Ok();
  EC_RETURN_IF_ERROR(comm.allreduce(flat.stats(), flat.stats(), flat.stats_count(),
                                    DataType::kFloat32, ReduceOp::kSum));
  const float scale = 1.0f / static_cast<float>(comm.size());
  for (size_t i = 0; i < flat.stats_count(); ++i) flat.stats()[i] *= scale;
  return Status::Ok();
}

// --on-failure continue: runs the trainer's own collective `fn` again over the survivors when it
// met a failed rank (the rounds shrink the communicator themselves when they meet it first).
// `opt` (may be null) is moved to the new group at once: survivors whose rounds met the failure
// wait for its account of the rounds.
Status survive(Communicator& comm, const TrainOptions& o, EagerSgd* opt,
               const std::function<Status()>& fn) {
  Status s = fn();
  if (s.ok() || o.on_failure != OnFailure::kContinue || s.code() != StatusCode::kPeerFailed) {
    return s;
  }
  std::fprintf(stderr, "eagercomm-train: %s; continuing with the survivors\n", s.message().c_str());
  EC_RETURN_IF_ERROR(comm.shrink().status());
  if (opt != nullptr) EC_RETURN_IF_ERROR(opt->rejoin());
  return fn();
}

// `target`: stop once past o.epochs at an evaluation that reaches it (--stop-at-target).
// `steps_run`: steps of this rank over the run so far (--die-at).
Result<ModeReport> train_mode(Communicator& comm, const TrainOptions& o, PartialMode mode,
                              uint64_t seed, const TaskData& d, std::optional<double> target,
                              uint64_t& steps_run) {
  // A failure survived (--on-failure continue) renumbers the ranks: P and rank are re-read at
  // every epoch.
  int P = comm.size(), rank = comm.rank();
  const int first_rank = rank;
  ModelOptions mo;
  mo.seed = static_cast<int64_t>(seed & 0x7fffffffffffffffull);
  if (d.sequences) {
    mo.input_dim = static_cast<int>(d.task->options().dim);
    mo.num_classes = d.task->options().classes;
  }
  EC_ASSIGN_OR_RETURN(Model model, make_model(o.model, mo));
  EC_ASSIGN_OR_RETURN(FlatParameters flat, FlatParameters::create(model.module()));

  SgdOptions so;
  so.mode = mode;
  so.partial.seed = seed;
  so.partial.sync_every = o.sync_every;
  so.partial.result_depth = 8;
  so.partial.solo_speedup = o.solo_speedup;
  so.lr.base = o.lr;
  so.lr.warmup_rounds = o.warmup_rounds;
  so.lr.milestones = o.milestones;
  so.lr.gamma = o.gamma;
  so.momentum = mode.kind == PartialKind::kSync ? o.momentum : o.eager_momentum_in_force();
  so.weight_decay = o.weight_decay;
  so.staleness = o.staleness;
  so.average_decay = o.average_decay;
  so.partial.on_failure = o.on_failure;
  EC_ASSIGN_OR_RETURN(
      std::unique_ptr<EagerSgd> opt,
      EagerSgd::create(comm, flat.params(), flat.grads(), flat.count(), MemoryKind::kHost, so));

  size_t steps = shard_size(d.n_train, P) / static_cast<size_t>(o.batch);
  if (steps == 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "eagercomm-train: %zu training samples over %d ranks give no full batch "
                       "of %d",
                       d.n_train, P, o.batch);
  }
  const size_t evals = static_cast<size_t>(o.evals_per_epoch);
  if (evals > steps) {
    return make_status(StatusCode::kInvalidArgument,
                       "eagercomm-train: --evals-per-epoch %d exceeds the %zu steps per epoch",
                       o.evals_per_epoch, steps);
  }
  // Evaluation k of an epoch follows step ends[k] - 1; the last one ends the epoch.
  std::vector<size_t> ends(evals);
  for (size_t k = 0; k < evals; ++k) ends[k] = (k + 1) * steps / evals;

  ModeReport report;
  report.mode = mode.name();
  report.seed = seed;
  char tag[64];
  std::snprintf(tag, sizeof(tag), "%s seed %llu", report.mode.c_str(),
                static_cast<unsigned long long>(seed));
  std::vector<float> scratch, swapped;
  std::vector<int64_t> labels;
  double trained = 0;  // seconds, evaluation excluded
  // Evaluates and appends a curve point at `trained` seconds, all ranks agreeing on the time.
  auto record = [&](double epoch, uint64_t step, double loss) -> Status {
    double accuracy = 0, slowest = 0;
    // --average: the averaged parameters stand in for the model's while it is evaluated.
    const float* averaged = opt->averaged();
    if (averaged) {
      swapped.assign(flat.params(), flat.params() + flat.count());
      std::copy(averaged, averaged + flat.count(), flat.params());
    }
    EC_RETURN_IF_ERROR(survive(comm, o, opt.get(), [&]() -> Status {
      EC_ASSIGN_OR_RETURN(accuracy, evaluate_all(comm, model, d));
      slowest = trained;
      return comm.allreduce(&slowest, &slowest, 1, DataType::kFloat64, ReduceOp::kMax);
    }));
    if (averaged) std::copy(swapped.begin(), swapped.end(), flat.params());
    report.curve.push_back({epoch, step, slowest, accuracy, loss});
    return Status::Ok();
  };
  // Time 0: every curve starts at the initial model (create() made the replicas identical).
  EC_RETURN_IF_ERROR(record(0.0, 0, std::nan("")));
  EC_RETURN_IF_ERROR(survive(comm, o, opt.get(), [&] { return comm.barrier(); }));
  double epoch_loss = 0;
  const int epochs = o.epochs_for(mode);
  bool stop = false;
  for (int epoch = 0; epoch < epochs && !stop; ++epoch) {
    if (comm.size() != P) {  // survivors of a failure: their shards and steps grow
      P = comm.size();
      rank = comm.rank();
      steps = shard_size(d.n_train, P) / static_cast<size_t>(o.batch);
      const size_t every = std::min(evals, steps);
      ends.assign(every, 0);
      for (size_t k = 0; k < every; ++k) ends[k] = (k + 1) * steps / every;
    }
    const std::vector<size_t> shard = epoch_shard(d.n_train, rank, P, seed, epoch);
    // A failure survived in this epoch: the survivors share the dead ranks' samples of the rest
    // of the epoch (trained after their own, before the epoch's last evaluation).
    const uint32_t epoch_generation = comm.generation();
    const size_t batch = static_cast<size_t>(o.batch);
    std::vector<size_t> taken_over;
    auto take_over = [&](size_t next_step) {
      if (comm.generation() != epoch_generation + 1) return;  // none, or taken, or several
      const std::vector<int> former = comm.former_ranks();
      for (int dead = 0; dead < P; ++dead) {
        if (std::find(former.begin(), former.end(), dead) != former.end()) continue;
        const std::vector<size_t> theirs = epoch_shard(d.n_train, dead, P, seed, epoch);
        for (size_t i = next_step * batch, j = 0; i < steps * batch && i < theirs.size();
             ++i, ++j) {
          if (static_cast<int>(j % former.size()) == comm.rank()) taken_over.push_back(theirs[i]);
        }
      }
      if (!taken_over.empty()) {
        std::fprintf(stderr,
                     "eagercomm-train: rank %d takes over %zu samples of the rest of epoch %d "
                     "from the ranks that failed\n",
                     comm.rank(), taken_over.size(), epoch + 1);
      }
    };
    epoch_loss = 0;
    size_t s = 0;
    for (size_t k = 0; k < ends.size(); ++k) {
      const auto start = Clock::now();
      double segment_loss = 0, window = 0;
      const size_t first = s;
      // One step on the samples `idx` (`s`: the step's number in the epoch, for the imbalance).
      auto train_step = [&](std::span<const size_t> idx, size_t s) -> Status {
        EC_ASSIGN_OR_RETURN(Batch b, make_batch(d, false, idx, scratch, labels));
        Result<float> loss = d.sequences ? forward_backward(model, b.input, b.lengths, b.labels)
                                         : forward_backward(model, b.input, b.labels);
        if (!loss.ok()) return loss.status();
        segment_loss += loss.value();
        window += loss.value();
        if (o.imbalance_linear && o.imbalance_ms > 0 && rank > 0) {
          std::this_thread::sleep_for(
              std::chrono::duration<double, std::milli>(o.imbalance_ms * rank));
        } else if (o.imbalance_k > 0 && o.imbalance_ms > 0) {
          const std::vector<int> slow =
              delayed_ranks(seed, static_cast<uint64_t>(epoch) * steps + s, P, o.imbalance_k);
          if (std::find(slow.begin(), slow.end(), rank) != slow.end()) {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.imbalance_ms));
          }
        }
        if (first_rank == o.die_rank && steps_run == o.die_step) {
          std::fprintf(stderr, "eagercomm-train: rank %d dies before step %llu (--die-at)\n",
                       first_rank, static_cast<unsigned long long>(steps_run));
          std::fflush(nullptr);
          ::raise(SIGKILL);
        }
        ++steps_run;
        return opt->step();
      };
      for (; s < ends[k]; ++s) {
        EC_RETURN_IF_ERROR(train_step({shard.data() + s * batch, batch}, s));
        if (taken_over.empty()) take_over(s + 1);
        if (rank == 0 && o.log_every > 0 && (s + 1) % o.log_every == 0) {
          const double t = trained + seconds_since(start);
          const double done = static_cast<double>(epoch * steps + s + 1);
          std::printf("[%s] epoch %d/%d step %zu/%zu loss %.4f samples/s %.0f\n", tag, epoch + 1,
                      epochs, s + 1, steps, window / o.log_every, done * o.batch * P / t);
          std::fflush(stdout);
          window = 0;
        }
      }
      if (k + 1 == ends.size()) {  // the dead ranks' samples this rank took over, if any
        if (taken_over.empty()) take_over(s);
        for (size_t at = 0; at + batch <= taken_over.size(); at += batch) {
          EC_RETURN_IF_ERROR(train_step({taken_over.data() + at, batch}, s));
        }
      }
      // The flush makes every replica identical for the evaluation; it is part of training
      // (an eager run pays for it), the evaluation is not.
      EC_RETURN_IF_ERROR(opt->finish());
      trained += seconds_since(start);
      {
        const std::vector<float> stats(flat.stats(), flat.stats() + flat.stats_count());
        EC_RETURN_IF_ERROR(survive(comm, o, opt.get(), [&] {
          std::copy(stats.begin(), stats.end(), flat.stats());  // a failed try may have written
          return average_stats(comm, flat);
        }));
      }
      epoch_loss += segment_loss;
      const uint64_t done = static_cast<uint64_t>(epoch) * steps + s;
      EC_RETURN_IF_ERROR(record(static_cast<double>(done) / static_cast<double>(steps), done,
                                segment_loss / static_cast<double>(s - first)));
      // Every rank sees the same accuracy (evaluate_all sums the counts), so all stop together.
      if (k + 1 == ends.size() && epoch + 1 >= o.epochs && target &&
          report.curve.back().accuracy >= *target) {
        stop = true;
      }
    }
    if (epoch + 1 == o.epochs) {
      report.accuracy = report.curve.back().accuracy;
      report.equal_epoch_seconds = report.curve.back().seconds;
    }
    if (rank == 0 && o.log_every > 0) {
      std::printf("[%s] epoch %d/%d done: %.1f s, loss %.4f, test accuracy %.2f%%\n", tag,
                  epoch + 1, epochs, report.curve.back().seconds,
                  epoch_loss / static_cast<double>(steps), 100.0 * report.curve.back().accuracy);
      std::fflush(stdout);
    }
  }
  const SgdStats& st = opt->stats();
  report.seconds = report.curve.back().seconds;
  const double steps_done = static_cast<double>(report.curve.back().step);
  report.samples_per_s = steps_done * o.batch * P / report.seconds;
  report.final_accuracy = report.curve.back().accuracy;
  report.loss = epoch_loss / static_cast<double>(steps);
  report.fresh_fraction = st.fresh_fraction(P);
  report.mean_staleness = st.mean_staleness();
  report.max_staleness = st.max_staleness();
  report.rounds = st.rounds_applied;
  report.steps = st.steps;
  report.waiting_s = std::chrono::duration<double>(st.waiting).count();
  report.mean_momentum = st.mean_momentum();
  report.lateness = opt->lateness();
  return report;
}

std::vector<CurvePoint> curve_points(const ModeReport& r) {
  std::vector<CurvePoint> out;
  out.reserve(r.curve.size());
  for (const EpochPoint& p : r.curve) out.push_back({p.seconds, p.accuracy});
  return out;
}

}  // namespace

std::vector<int> delayed_ranks(uint64_t seed, uint64_t step, int size, int k) {
  // The first k of a permutation of the ranks drawn from (seed, step), like the data shuffle
  // (another stream: the seed is salted, so the draws do not follow the shuffle's).
  constexpr uint64_t kImbalanceSalt = 0x696d62616c616e63ull;  // "imbalanc"
  const std::vector<size_t> order =
      epoch_permutation(static_cast<size_t>(std::max(size, 0)), seed ^ kImbalanceSalt, step);
  return std::vector<int>(order.begin(), order.begin() + std::clamp(k, 0, std::max(size, 0)));
}

Result<std::vector<ModeReport>> train(Communicator& comm, const TrainOptions& options) {
  if (options.imbalance_k > comm.size()) {
    return make_status(StatusCode::kInvalidArgument,
                       "eagercomm-train: --imbalance %d:%g delays more ranks than the %d there are",
                       options.imbalance_k, options.imbalance_ms, comm.size());
  }
  // Every rank loads the data; a rank that cannot makes the others fail too (no hang).
  Result<TaskData> data = load_task(options);
  int64_t failed = data.ok() ? 0 : 1;
  EC_RETURN_IF_ERROR(comm.allreduce(&failed, &failed, 1, DataType::kInt64, ReduceOp::kSum));
  if (!data.ok()) return data.status();
  if (failed) {
    return make_status(StatusCode::kPeerFailed,
                       "eagercomm-train: %lld rank(s) could not load the data set",
                       static_cast<long long>(failed));
  }
  std::vector<ModeReport> out;
  uint64_t steps_run = 0;
  for (uint64_t seed : options.seeds_in_force()) {
    std::optional<double> target;  // this seed's sync accuracy, once sync has run
    for (PartialMode mode : options.modes) {
      EC_ASSIGN_OR_RETURN(
          ModeReport r,
          train_mode(
              comm, options, mode, seed, data.value(),
              options.stop_at_target && mode.kind != PartialKind::kSync ? target : std::nullopt,
              steps_run));
      if (mode.kind == PartialKind::kSync && !target) target = r.accuracy;
      out.push_back(std::move(r));
    }
  }
  compare_runs(out);
  return out;
}

void compare_runs(std::vector<ModeReport>& reports) {
  for (ModeReport& r : reports) {
    const ModeReport* sync = nullptr;
    double shortest = r.seconds;
    for (const ModeReport& other : reports) {
      if (other.seed != r.seed) continue;
      if (!sync && other.mode == "sync") sync = &other;
      shortest = std::min(shortest, other.seconds);
    }
    const std::vector<CurvePoint> curve = curve_points(r);
    r.equal_time = shortest;
    r.accuracy_at_equal_time = accuracy_at(curve, shortest).value_or(r.accuracy);
    r.epoch_speedup.reset();
    r.target_accuracy.reset();
    r.time_to_sync_accuracy.reset();
    r.tta_speedup.reset();
    if (!sync) continue;
    r.epoch_speedup = speedup(sync->seconds, r.equal_epoch_seconds);
    r.target_accuracy = sync->accuracy;
    r.time_to_sync_accuracy = time_to_accuracy(curve, sync->accuracy);
    const std::optional<double> sync_time = time_to_accuracy(curve_points(*sync), sync->accuracy);
    r.tta_speedup =
        &r == sync ? std::optional<double>(1.0) : speedup(sync_time, r.time_to_sync_accuracy);
  }
}

namespace {

// One mode's runs over the seeds: what the table prints and the JSON summary holds.
struct ModeSummary {
  std::string mode;
  std::vector<uint64_t> seeds;
  bool compared = false;  // a sync run gave a target
  Spread seconds, samples_per_s, epoch_speedup, accuracy, time_to_sync_accuracy, tta_speedup,
      accuracy_at_equal_time, fresh_fraction, mean_staleness, rounds, mean_momentum;
  int max_staleness = 0;
};

// In the order the modes first appear (the --mode order).
std::vector<ModeSummary> summarize(const std::vector<ModeReport>& reports) {
  std::vector<std::string> order;
  for (const ModeReport& r : reports) {
    if (std::find(order.begin(), order.end(), r.mode) == order.end()) order.push_back(r.mode);
  }
  std::vector<ModeSummary> out;
  for (const std::string& mode : order) {
    ModeSummary m;
    m.mode = mode;
    std::vector<std::optional<double>> v[11];
    for (const ModeReport& r : reports) {
      if (r.mode != mode) continue;
      m.seeds.push_back(r.seed);
      m.compared = m.compared || r.target_accuracy.has_value();
      m.max_staleness = std::max(m.max_staleness, r.max_staleness);
      const std::optional<double> values[11] = {r.seconds,
                                                r.samples_per_s,
                                                r.epoch_speedup,
                                                r.accuracy,
                                                r.time_to_sync_accuracy,
                                                r.tta_speedup,
                                                r.accuracy_at_equal_time,
                                                r.fresh_fraction,
                                                r.mean_staleness,
                                                static_cast<double>(r.rounds),
                                                r.mean_momentum};
      for (int i = 0; i < 11; ++i) v[i].push_back(values[i]);
    }
    Spread* fields[11] = {&m.seconds,
                          &m.samples_per_s,
                          &m.epoch_speedup,
                          &m.accuracy,
                          &m.time_to_sync_accuracy,
                          &m.tta_speedup,
                          &m.accuracy_at_equal_time,
                          &m.fresh_fraction,
                          &m.mean_staleness,
                          &m.rounds,
                          &m.mean_momentum};
    for (int i = 0; i < 11; ++i) *fields[i] = spread(v[i]);
    out.push_back(std::move(m));
  }
  return out;
}

std::string seed_list(const std::vector<uint64_t>& seeds) {
  std::string out;
  for (size_t i = 0; i < seeds.size(); ++i) {
    out += (i ? "," : "") + std::to_string(seeds[i]);
  }
  return out;
}

// "mean [min,max]" of a spread, `scale` times each value; the value alone when there is one (a
// single seed), "-" when there is none.
std::string mean_range(const Spread& s, double scale, const char* unit) {
  if (!s.mean) return "-";
  char buf[96];
  if (s.reached() == 1) {
    std::snprintf(buf, sizeof(buf), "%.2f%s", scale * *s.mean, unit);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f%s [%.2f,%.2f]", scale * *s.mean, unit, scale * *s.min,
                  scale * *s.max);
  }
  return buf;
}

// A JSON number, null when missing or not finite (JSON has no NaN).
std::string num(std::optional<double> v, const char* format = "%.6g") {
  if (!v || !std::isfinite(*v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, *v);
  return buf;
}

std::string spread_json(const Spread& s, bool not_reached = false) {
  std::string out = "{\"mean\": " + num(s.mean) + ", \"min\": " + num(s.min) +
                    ", \"max\": " + num(s.max) + ", \"stddev\": " + num(s.stddev) +
                    ", \"n\": " + std::to_string(s.reached());
  if (not_reached) out += ", \"not_reached\": " + std::to_string(s.missing);
  return out + "}";
}

}  // namespace

std::string format_reports(const std::vector<ModeReport>& reports, const TrainOptions& o,
                           int size) {
  const std::vector<ModeSummary> modes = summarize(reports);
  std::string out;
  char line[512];
  char imbalance[96];
  if (o.imbalance_linear) {
    std::snprintf(imbalance, sizeof(imbalance), "rank r sleeps r x %g ms per step", o.imbalance_ms);
  } else {
    std::snprintf(imbalance, sizeof(imbalance), "%d rank(s) x %g ms per step", o.imbalance_k,
                  o.imbalance_ms);
  }
  std::snprintf(line, sizeof(line),
                "# eagercomm-train: model %s, %d ranks, %d epoch(s), batch %d per rank, "
                "imbalance %s\n",
                o.model.c_str(), size, o.epochs, o.batch, imbalance);
  out += line;
  if (o.eager_epochs > 0 && o.eager_epochs != o.epochs) {
    std::snprintf(line, sizeof(line),
                  "# eager modes: up to %d epoch(s)%s; test acc is read after %d epoch(s)\n",
                  o.eager_epochs, o.stop_at_target ? ", stopping at sync's accuracy" : "",
                  o.epochs);
    out += line;
  }
  std::snprintf(line, sizeof(line), "# lr %g, momentum %g (eager modes %g), weight decay %g\n",
                o.lr, o.momentum, o.eager_momentum_in_force(), o.weight_decay);
  out += line;
  out += "# seeds " + seed_list(o.seeds_in_force());
  std::snprintf(line, sizeof(line),
                "; %d evaluation(s) per epoch; staleness rule %s; solo speedup %g%s\n",
                o.evals_per_epoch, staleness_rule_name(o.staleness).c_str(), o.solo_speedup,
                o.average_decay > 0 ? "; parameters averaged for evaluation" : "");
  out += line;
  // What the less obvious columns mean, in the table itself: it is what users paste around.
  out +=
      "# mean [min,max] over the seeds; x/ep: sync's time per epoch over the mode's;\n"
      "# acc@T: test accuracy at the training time of the seed's fastest run;\n"
      "# to-sync-acc: speedup over sync in time to the seed's sync final accuracy\n";
  std::snprintf(line, sizeof(line), "# %-9s %7s %5s %-19s %-19s %5s %6s %6s %4s %s\n", "mode",
                "time(s)", "x/ep", "test acc (%)", "acc@T (%)", "fresh", "stale", "rounds", "mom",
                "to-sync-acc");
  out += line;
  for (const ModeSummary& m : modes) {
    char epoch_x[16] = "-";
    if (m.epoch_speedup.mean)
      std::snprintf(epoch_x, sizeof(epoch_x), "%.2fx", *m.epoch_speedup.mean);
    std::string tta = "-";
    if (m.compared) {
      const Spread& x = m.tta_speedup;
      const std::string missed =
          std::to_string(x.missing) + "/" + std::to_string(x.count) + " not reached";
      tta = !x.mean ? missed : mean_range(x, 1.0, "x") + (x.missing ? " " + missed : "");
    }
    std::snprintf(line, sizeof(line),
                  "  %-9s %7.1f %5s %-19s %-19s %5.2f %4.2f/%-1d %6.0f %4.2f %s\n", m.mode.c_str(),
                  m.seconds.mean.value_or(0), epoch_x, mean_range(m.accuracy, 100, "").c_str(),
                  mean_range(m.accuracy_at_equal_time, 100, "").c_str(),
                  m.fresh_fraction.mean.value_or(0), m.mean_staleness.mean.value_or(0),
                  m.max_staleness, m.rounds.mean.value_or(0), m.mean_momentum.mean.value_or(0),
                  tta.c_str());
    out += line;
  }
  return out;
}

std::string reports_to_json(const std::vector<ModeReport>& reports, const TrainOptions& o,
                            int size) {
  std::string out =
      "{\"model\": \"" + o.model + "\", \"ranks\": " + std::to_string(size) +
      ", \"epochs\": " + std::to_string(o.epochs) + ", \"batch\": " + std::to_string(o.batch) +
      ", \"imbalance_ranks\": " + std::to_string(o.imbalance_k) +
      ", \"imbalance_ms\": " + num(o.imbalance_ms) +
      ", \"imbalance_linear\": " + (o.imbalance_linear ? "true" : "false") +
      ", \"eager_epochs\": " + std::to_string(o.eager_epochs > 0 ? o.eager_epochs : o.epochs) +
      ", \"stop_at_target\": " + (o.stop_at_target ? "true" : "false") + ", \"lr\": " + num(o.lr) +
      ", \"momentum\": " + num(o.momentum) +
      ", \"eager_momentum\": " + num(o.eager_momentum_in_force()) +
      ", \"weight_decay\": " + num(o.weight_decay) + ", \"staleness\": \"" +
      staleness_rule_name(o.staleness) + "\", \"solo_speedup\": " + num(o.solo_speedup) +
      ", \"average_decay\": " + num(o.average_decay) + ", \"seeds\": [" +
      seed_list(o.seeds_in_force()) +
      "], \"evals_per_epoch\": " + std::to_string(o.evals_per_epoch) + ", \"modes\": [";
  char buf[768];
  for (size_t i = 0; i < reports.size(); ++i) {
    const ModeReport& r = reports[i];
    std::snprintf(
        buf, sizeof(buf),
        "%s{\"mode\": \"%s\", \"seed\": %llu, \"seconds\": %.4f, \"samples_per_s\": %.2f, "
        "\"accuracy\": %.5f, \"loss\": %s, \"fresh_fraction\": %.4f, "
        "\"mean_staleness\": %.4f, \"max_staleness\": %d, \"rounds\": %llu, "
        "\"steps\": %llu, \"waiting_s\": %.4f, \"mean_momentum\": %.5f, ",
        i ? ", " : "", r.mode.c_str(), static_cast<unsigned long long>(r.seed), r.seconds,
        r.samples_per_s, r.accuracy, num(r.loss, "%.5f").c_str(), r.fresh_fraction,
        r.mean_staleness, r.max_staleness, static_cast<unsigned long long>(r.rounds),
        static_cast<unsigned long long>(r.steps), r.waiting_s, r.mean_momentum);
    out += buf;
    out += "\"final_accuracy\": " + num(r.final_accuracy, "%.5f") +
           ", \"equal_epoch_seconds\": " + num(r.equal_epoch_seconds, "%.4f") +
           ", \"epoch_speedup\": " + num(r.epoch_speedup, "%.4f") +
           ", \"target_accuracy\": " + num(r.target_accuracy, "%.5f") +
           ", \"time_to_sync_accuracy\": " + num(r.time_to_sync_accuracy, "%.4f") +
           ", \"tta_speedup\": " + num(r.tta_speedup, "%.4f") +
           ", \"equal_time\": " + num(r.equal_time, "%.4f") +
           ", \"accuracy_at_equal_time\": " + num(r.accuracy_at_equal_time, "%.5f") +
           ", \"curve\": [";
    for (size_t e = 0; e < r.curve.size(); ++e) {
      const EpochPoint& p = r.curve[e];
      std::snprintf(buf, sizeof(buf),
                    "%s{\"epoch\": %.4f, \"step\": %llu, \"seconds\": %.4f, \"accuracy\": %.5f, "
                    "\"loss\": %s}",
                    e ? ", " : "", p.epoch, static_cast<unsigned long long>(p.step), p.seconds,
                    p.accuracy, num(p.loss, "%.5f").c_str());
      out += buf;
    }
    // Straggler attribution per rank: rounds fresh / late / absent, rounds late, estimated s.
    out += "], \"lateness\": [";
    for (size_t q = 0; q < r.lateness.size(); ++q) {
      const RankLateness& l = r.lateness[q];
      std::snprintf(
          buf, sizeof(buf),
          "%s{\"rank\": %zu, \"rounds\": %llu, \"posts\": %llu, \"fresh\": %llu, \"late\": %llu, "
          "\"absent\": %llu, \"late_rounds\": %llu, \"max_age\": %d, "
          "\"late_seconds\": %.4f, \"late_fraction\": %.4f}",
          q ? ", " : "", q, static_cast<unsigned long long>(l.rounds),
          static_cast<unsigned long long>(l.posts), static_cast<unsigned long long>(l.fresh),
          static_cast<unsigned long long>(l.late), static_cast<unsigned long long>(l.absent),
          static_cast<unsigned long long>(l.late_rounds), l.max_age, l.late_seconds,
          l.late_fraction());
      out += buf;
    }
    out += "]}";
  }
  out += "], \"summary\": [";
  const std::vector<ModeSummary> modes = summarize(reports);
  for (size_t i = 0; i < modes.size(); ++i) {
    const ModeSummary& m = modes[i];
    // Without a sync run there is nothing to compare with: null rather than "never reached".
    auto compared = [&m](const Spread& s, bool not_reached) {
      return m.compared ? spread_json(s, not_reached) : std::string("null");
    };
    out += std::string(i ? ", " : "") + "{\"mode\": \"" + m.mode +
           "\", \"runs\": " + std::to_string(m.seeds.size()) + ", \"seeds\": [" +
           seed_list(m.seeds) + "], \"seconds\": " + spread_json(m.seconds) +
           ", \"samples_per_s\": " + spread_json(m.samples_per_s) +
           ", \"epoch_speedup\": " + compared(m.epoch_speedup, false) +
           ", \"accuracy\": " + spread_json(m.accuracy) +
           ", \"time_to_sync_accuracy\": " + compared(m.time_to_sync_accuracy, true) +
           ", \"tta_speedup\": " + compared(m.tta_speedup, true) +
           ", \"accuracy_at_equal_time\": " + spread_json(m.accuracy_at_equal_time) +
           ", \"fresh_fraction\": " + spread_json(m.fresh_fraction) +
           ", \"mean_staleness\": " + spread_json(m.mean_staleness) +
           ", \"max_staleness\": " + std::to_string(m.max_staleness) +
           ", \"rounds\": " + spread_json(m.rounds) +
           ", \"mean_momentum\": " + spread_json(m.mean_momentum) + "}";
  }
  return out + "]}\n";
}

std::string curves_to_csv(const std::vector<ModeReport>& reports) {
  std::string out = "mode,seed,epoch,step,seconds,accuracy,loss\n";
  char buf[192];
  for (const ModeReport& r : reports) {
    for (const EpochPoint& p : r.curve) {
      // The point before training has no training loss: an empty field.
      char loss[32] = "";
      if (std::isfinite(p.loss)) std::snprintf(loss, sizeof(loss), "%.5f", p.loss);
      std::snprintf(buf, sizeof(buf), "%s,%llu,%.4f,%llu,%.4f,%.5f,%s\n", r.mode.c_str(),
                    static_cast<unsigned long long>(r.seed), p.epoch,
                    static_cast<unsigned long long>(p.step), p.seconds, p.accuracy, loss);
      out += buf;
    }
  }
  return out;
}

}  // namespace eagercomm::sgd
