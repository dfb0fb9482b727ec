#include "sgd/train/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
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
    so.seed = o.seed;
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

Result<ModeReport> train_mode(Communicator& comm, const TrainOptions& o, PartialMode mode,
                              const TaskData& d) {
  const int P = comm.size(), rank = comm.rank();
  ModelOptions mo;
  mo.seed = static_cast<int64_t>(o.seed & 0x7fffffffffffffffull);
  if (d.sequences) {
    mo.input_dim = static_cast<int>(d.task->options().dim);
    mo.num_classes = d.task->options().classes;
  }
  EC_ASSIGN_OR_RETURN(Model model, make_model(o.model, mo));
  EC_ASSIGN_OR_RETURN(FlatParameters flat, FlatParameters::create(model.module()));

  SgdOptions so;
  so.mode = mode;
  so.partial.seed = o.seed;
  so.partial.sync_every = o.sync_every;
  so.partial.result_depth = 8;
  so.lr.base = o.lr;
  so.lr.warmup_rounds = o.warmup_rounds;
  so.lr.milestones = o.milestones;
  so.lr.gamma = o.gamma;
  so.momentum = mode.kind == PartialKind::kSync ? o.momentum : o.eager_momentum_in_force();
  so.weight_decay = o.weight_decay;
  EC_ASSIGN_OR_RETURN(
      std::unique_ptr<EagerSgd> opt,
      EagerSgd::create(comm, flat.params(), flat.grads(), flat.count(), MemoryKind::kHost, so));

  const size_t per_rank = shard_size(d.n_train, P);
  const size_t steps = per_rank / static_cast<size_t>(o.batch);
  if (steps == 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "eagercomm-train: %zu training samples over %d ranks give no full batch "
                       "of %d",
                       d.n_train, P, o.batch);
  }
  ModeReport report;
  report.mode = mode.name();
  std::vector<float> scratch;
  std::vector<int64_t> labels;
  double trained = 0;  // seconds, evaluation excluded
  EC_RETURN_IF_ERROR(comm.barrier());
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const auto start = Clock::now();
    const std::vector<size_t> shard = epoch_shard(d.n_train, rank, P, o.seed, epoch);
    double loss_sum = 0, window = 0;
    for (size_t s = 0; s < steps; ++s) {
      std::span<const size_t> idx(shard.data() + s * o.batch, o.batch);
      EC_ASSIGN_OR_RETURN(Batch b, make_batch(d, false, idx, scratch, labels));
      Result<float> loss = d.sequences ? forward_backward(model, b.input, b.lengths, b.labels)
                                       : forward_backward(model, b.input, b.labels);
      if (!loss.ok()) return loss.status();
      loss_sum += loss.value();
      window += loss.value();
      if (o.imbalance_k > 0 && o.imbalance_ms > 0) {
        const std::vector<int> slow =
            delayed_ranks(o.seed, static_cast<uint64_t>(epoch) * steps + s, P, o.imbalance_k);
        if (std::find(slow.begin(), slow.end(), rank) != slow.end()) {
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.imbalance_ms));
        }
      }
      EC_RETURN_IF_ERROR(opt->step());
      if (rank == 0 && o.log_every > 0 && (s + 1) % o.log_every == 0) {
        const double t = trained + seconds_since(start);
        const double done = static_cast<double>(epoch * steps + s + 1);
        std::printf("[%s] epoch %d/%d step %zu/%zu loss %.4f samples/s %.0f\n", report.mode.c_str(),
                    epoch + 1, o.epochs, s + 1, steps, window / o.log_every,
                    done * o.batch * P / t);
        std::fflush(stdout);
        window = 0;
      }
    }
    EC_RETURN_IF_ERROR(opt->finish());
    trained += seconds_since(start);
    // BatchNorm running statistics were gathered on each rank's own batches: average them so
    // that the replicas evaluate (and continue) identically.
    if (flat.stats_count() > 0) {
      EC_RETURN_IF_ERROR(comm.allreduce(flat.stats(), flat.stats(), flat.stats_count(),
                                        DataType::kFloat32, ReduceOp::kSum));
      const float scale = 1.0f / static_cast<float>(P);
      for (size_t i = 0; i < flat.stats_count(); ++i) flat.stats()[i] *= scale;
    }
    EC_ASSIGN_OR_RETURN(double accuracy, evaluate_all(comm, model, d));
    double slowest = trained;
    EC_RETURN_IF_ERROR(comm.allreduce(&slowest, &slowest, 1, DataType::kFloat64, ReduceOp::kMax));
    report.curve.push_back({epoch + 1, slowest, accuracy, loss_sum / static_cast<double>(steps)});
    if (rank == 0 && o.log_every > 0) {
      std::printf("[%s] epoch %d/%d done: %.1f s, loss %.4f, test accuracy %.2f%%\n",
                  report.mode.c_str(), epoch + 1, o.epochs, slowest,
                  loss_sum / static_cast<double>(steps), 100.0 * accuracy);
      std::fflush(stdout);
    }
  }
  const SgdStats& st = opt->stats();
  report.seconds = report.curve.back().seconds;
  report.samples_per_s = static_cast<double>(steps * o.epochs * o.batch * P) / report.seconds;
  report.accuracy = report.curve.back().accuracy;
  report.loss = report.curve.back().loss;
  report.fresh_fraction = st.fresh_fraction(P);
  report.mean_staleness = st.mean_staleness();
  report.max_staleness = st.max_staleness();
  report.rounds = st.rounds_applied;
  report.steps = st.steps;
  report.waiting_s = std::chrono::duration<double>(st.waiting).count();
  return report;
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
  for (PartialMode mode : options.modes) {
    EC_ASSIGN_OR_RETURN(ModeReport r, train_mode(comm, options, mode, data.value()));
    out.push_back(std::move(r));
  }
  return out;
}

std::string format_reports(const std::vector<ModeReport>& reports, const TrainOptions& o,
                           int size) {
  const ModeReport* sync = nullptr;
  for (const ModeReport& r : reports) {
    if (r.mode == "sync") sync = &r;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line),
                "# eagercomm-train: model %s, %d ranks, %d epoch(s), batch %d per rank, "
                "imbalance %d rank(s) x %g ms per step\n",
                o.model.c_str(), size, o.epochs, o.batch, o.imbalance_k, o.imbalance_ms);
  out += line;
  std::snprintf(line, sizeof(line), "# lr %g, momentum %g (eager modes %g), weight decay %g\n",
                o.lr, o.momentum, o.eager_momentum_in_force(),
                o.weight_decay);
  out += line;
  std::snprintf(line, sizeof(line), "# %-12s %9s %8s %10s %9s %6s %12s %8s\n", "mode", "time(s)",
                "speedup", "samples/s", "test acc", "fresh", "stale avg/max", "rounds");
  out += line;
  for (const ModeReport& r : reports) {
    char speedup[16] = "-";
    if (sync) std::snprintf(speedup, sizeof(speedup), "%.2fx", sync->seconds / r.seconds);
    std::snprintf(line, sizeof(line), "  %-12s %9.1f %8s %10.0f %8.2f%% %6.2f %8.2f/%-3d %8llu\n",
                  r.mode.c_str(), r.seconds, speedup, r.samples_per_s, 100.0 * r.accuracy,
                  r.fresh_fraction, r.mean_staleness, r.max_staleness,
                  static_cast<unsigned long long>(r.rounds));
    out += line;
  }
  return out;
}

std::string reports_to_json(const std::vector<ModeReport>& reports, const TrainOptions& o,
                            int size) {
  std::string out = "{\"model\": \"" + o.model + "\", \"ranks\": " + std::to_string(size) +
                    ", \"epochs\": " + std::to_string(o.epochs) +
                    ", \"batch\": " + std::to_string(o.batch) +
                    ", \"imbalance_ranks\": " + std::to_string(o.imbalance_k) +
                    ", \"imbalance_ms\": " + std::to_string(o.imbalance_ms) + ", \"modes\": [";
  char buf[512];
  for (size_t i = 0; i < reports.size(); ++i) {
    const ModeReport& r = reports[i];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"mode\": \"%s\", \"seconds\": %.4f, \"samples_per_s\": %.2f, "
                  "\"accuracy\": %.5f, \"loss\": %.5f, \"fresh_fraction\": %.4f, "
                  "\"mean_staleness\": %.4f, \"max_staleness\": %d, \"rounds\": %llu, "
                  "\"steps\": %llu, \"waiting_s\": %.4f, \"curve\": [",
                  i ? ", " : "", r.mode.c_str(), r.seconds, r.samples_per_s, r.accuracy, r.loss,
                  r.fresh_fraction, r.mean_staleness, r.max_staleness,
                  static_cast<unsigned long long>(r.rounds),
                  static_cast<unsigned long long>(r.steps), r.waiting_s);
    out += buf;
    for (size_t e = 0; e < r.curve.size(); ++e) {
      std::snprintf(buf, sizeof(buf), "%s{\"epoch\": %d, \"seconds\": %.4f, \"accuracy\": %.5f}",
                    e ? ", " : "", r.curve[e].epoch, r.curve[e].seconds, r.curve[e].accuracy);
      out += buf;
    }
    out += "]}";
  }
  return out + "]}\n";
}

std::string curves_to_csv(const std::vector<ModeReport>& reports) {
  std::string out = "mode,epoch,seconds,accuracy,loss\n";
  char buf[160];
  for (const ModeReport& r : reports) {
    for (const EpochPoint& p : r.curve) {
      std::snprintf(buf, sizeof(buf), "%s,%d,%.4f,%.5f,%.5f\n", r.mode.c_str(), p.epoch, p.seconds,
                    p.accuracy, p.loss);
      out += buf;
    }
  }
  return out;
}

}  // namespace eagercomm::sgd
