#include "sgd/eager_sgd.h"

#include <algorithm>
#include <cmath>

#include "collectives/communicator_impl.h"
#include "runtime/gpu.h"
#include "sgd/sgd_log.h"

namespace eagercomm::sgd {
namespace {

using Clock = std::chrono::steady_clock;

// Rounds the running mean staleness averages over (an exponential average): long enough to be
// steady, short enough to follow a change of imbalance within an epoch.
constexpr double kStalenessWindow = 50.0;

// A round's mean staleness: the mean age of the contributions that held data.
double round_staleness(const RoundResult& r) {
  double sum = 0;
  int n = 0;
  for (int q = 0; q < r.ranks(); ++q) {
    const int a = r.age(q);
    if (a < 0) continue;
    sum += a;
    ++n;
  }
  return n ? sum / n : 0.0;
}

}  // namespace

std::string staleness_rule_name(StalenessRule rule) {
  switch (rule) {
    case StalenessRule::kNone:
      return "none";
    case StalenessRule::kMomentum:
      return "momentum";
    case StalenessRule::kRate:
      return "rate";
    case StalenessRule::kStep:
      return "step";
  }
  return "?";
}

Result<StalenessRule> parse_staleness_rule(std::string_view text) {
  if (text == "none") return StalenessRule::kNone;
  if (text == "momentum") return StalenessRule::kMomentum;
  if (text == "rate") return StalenessRule::kRate;
  if (text == "step") return StalenessRule::kStep;
  return make_status(StatusCode::kInvalidArgument,
                     "unknown staleness rule '%.*s' (accepted: none, momentum, rate, step)",
                     static_cast<int>(text.size()), text.data());
}

double SgdStats::fresh_fraction(int size) const {
  if (rounds_applied == 0 || size <= 0) return 0.0;
  // Over the ranks each round had: a failure survived changes the size.
  const double slots = rank_rounds > 0 ? static_cast<double>(rank_rounds)
                                       : static_cast<double>(rounds_applied) * size;
  return static_cast<double>(fresh_contributions) / slots;
}

double SgdStats::mean_staleness() const {
  uint64_t rounds = 0, sum = 0;
  for (size_t a = 0; a < staleness.size(); ++a) {
    rounds += staleness[a];
    sum += staleness[a] * a;
  }
  return rounds ? static_cast<double>(sum) / static_cast<double>(rounds) : 0.0;
}

int SgdStats::max_staleness() const {
  for (size_t a = staleness.size(); a-- > 0;) {
    if (staleness[a]) return static_cast<int>(a);
  }
  return 0;
}

Result<std::unique_ptr<EagerSgd>> EagerSgd::create(Communicator& comm, float* params, float* grads,
                                                   size_t count, MemoryKind memory,
                                                   const SgdOptions& options) {
  // Local checks first, but every rank still takes part in the collective create below so that
  // a rank with bad arguments cannot leave the others waiting: its partial allreduce is made
  // with a count no other rank uses, which fails the creation on every rank.
  Status local;
  if (memory == MemoryKind::kCuda) {
    local = Status(StatusCode::kNotSupported,
                   "eager SGD: CUDA buffers are not supported yet (host memory only)");
  } else if (memory != MemoryKind::kHost) {
    local = make_status(StatusCode::kInvalidArgument, "eager SGD: memory kind %d is unknown",
                        static_cast<int>(memory));
  } else if (count == 0) {
    local = Status(StatusCode::kInvalidArgument, "eager SGD: zero parameters");
  } else if (params == nullptr || grads == nullptr) {
    local = Status(StatusCode::kInvalidArgument, "eager SGD: null parameter or gradient buffer");
  } else if (params == grads) {
    local = Status(StatusCode::kInvalidArgument,
                   "eager SGD: parameters and gradients are the same buffer");
  } else if (Status p = gpu::check_buffer_kind(params, eagercomm::MemoryKind::kHost,
                                               "eager SGD parameters");
             !p.ok()) {
    local = p;  // a GPU tensor's storage passed as host memory
  } else if (Status g =
                 gpu::check_buffer_kind(grads, eagercomm::MemoryKind::kHost, "eager SGD gradients");
             !g.ok()) {
    local = g;
  } else if (!(options.momentum >= 0 && options.momentum < 1)) {
    local = make_status(StatusCode::kInvalidArgument, "eager SGD: momentum %g is not in [0, 1)",
                        options.momentum);
  } else if (!(options.weight_decay >= 0) || !std::isfinite(options.weight_decay)) {
    local = make_status(StatusCode::kInvalidArgument,
                        "eager SGD: weight decay %g must be finite and >= 0", options.weight_decay);
  } else if (!(options.average_decay >= 0 && options.average_decay < 1)) {
    local = make_status(StatusCode::kInvalidArgument,
                        "eager SGD: average decay %g is not in [0, 1)", options.average_decay);
  } else if (auto timeout = detail::check_timeout(options.timeout, "eager SGD"); !timeout.ok()) {
    local = timeout.status();
  } else if (options.staleness != StalenessRule::kNone &&
             options.staleness != StalenessRule::kMomentum &&
             options.staleness != StalenessRule::kRate &&
             options.staleness != StalenessRule::kStep) {
    local = make_status(StatusCode::kInvalidArgument, "eager SGD: staleness rule %d is unknown",
                        static_cast<int>(options.staleness));
  } else {
    local = options.lr.validate();
  }
  // A count of 0 elements is never a valid object size elsewhere: it marks "this rank failed".
  Result<std::unique_ptr<PartialAllreduce>> pa = PartialAllreduce::create(
      comm, local.ok() ? count : 0, DataType::kFloat32, options.mode, options.partial);
  if (!local.ok()) return local;
  if (!pa.ok()) {
    return make_status(pa.status().code(), "eager SGD on rank %d: %s", comm.rank(),
                       pa.status().message().c_str());
  }
  if (options.broadcast_initial) {
    Status st = comm.broadcast(params, count, DataType::kFloat32, 0);
    if (!st.ok()) {
      return make_status(st.code(), "eager SGD: broadcasting the initial parameters: %s",
                         st.message().c_str());
    }
  }
  EC_INFO(kSgd,
          "eager SGD over %zu parameters, mode %s, lr %s, momentum %g, "
          "weight decay %g, staleness rule %s",
          count, options.mode.name().c_str(), options.lr.describe().c_str(), options.momentum,
          options.weight_decay, staleness_rule_name(options.staleness).c_str());
  return std::unique_ptr<EagerSgd>(
      new EagerSgd(options, params, grads, count, std::move(pa).value()));
}

EagerSgd::EagerSgd(const SgdOptions& options, float* params, float* grads, size_t count,
                   std::unique_ptr<PartialAllreduce> pa)
    : options_(options),
      params_(params),
      grads_(grads),
      count_(count),
      pa_(std::move(pa)),
      velocity_(options.momentum > 0 ? count : 0, 0.0f) {
  if (options.average_decay > 0) average_.assign(params, params + count);
}

EagerSgd::~EagerSgd() = default;

bool EagerSgd::lowers_momentum() const {
  return options_.staleness == StalenessRule::kMomentum ||
         options_.staleness == StalenessRule::kStep;
}

double EagerSgd::current_momentum() const {
  if (!lowers_momentum()) return options_.momentum;
  return std::max(0.0, 1.0 - (1.0 - options_.momentum) * (1.0 + staleness_avg_));
}

double EagerSgd::keep_total_step(double rate) const {
  if (options_.staleness != StalenessRule::kStep || options_.momentum <= 0) return rate;
  // A gradient moves the model by lr / (1 - mu) in all, over the rounds after it: lowering mu
  // alone shrinks that by 1 + s. Keeping it measured worse (sgd/EXPERIMENTS.md, 2026-12-07):
  // the shrinking is part of why kMomentum works.
  return rate * (1.0 - current_momentum()) / (1.0 - options_.momentum);
}

double EagerSgd::current_lr() const {
  return keep_total_step(options_.lr.at(stats_.rounds_applied));
}

void EagerSgd::apply(const RoundResult& result) {
  if (result.contributors() == 0) {
    // No rank had anything: no step (the metadata is identical on every rank, so all skip it).
    ++stats_.rounds_applied;
    ++stats_.empty_rounds;
    return;
  }
  const auto start = Clock::now();
  const double s = round_staleness(result);
  double rate = options_.lr.at(result.round());
  if (lowers_momentum()) {
    staleness_avg_ += (s - staleness_avg_) / kStalenessWindow;
  } else if (options_.staleness == StalenessRule::kRate) {
    rate /= 1.0 + s;
  }
  const double momentum = current_momentum();
  rate = keep_total_step(rate);
  stats_.momentum_sum += momentum;
  stats_.lr_sum += rate;
  stats_.staleness_sum += s;
  const float lr = static_cast<float>(rate);
  const float mu = static_cast<float>(momentum);
  const float wd = static_cast<float>(options_.weight_decay);
  std::span<const float> g = result.as<float>();
  float* p = params_;
  if (velocity_.empty()) {
    for (size_t i = 0; i < count_; ++i) p[i] -= lr * (g[i] + wd * p[i]);
  } else {
    float* v = velocity_.data();
    for (size_t i = 0; i < count_; ++i) {
      v[i] = mu * v[i] + (g[i] + wd * p[i]);
      p[i] -= lr * v[i];
    }
  }
  if (!average_.empty()) {
    const float keep = static_cast<float>(options_.average_decay);
    float* a = average_.data();
    for (size_t i = 0; i < count_; ++i) a[i] = keep * a[i] + (1.0f - keep) * p[i];
  }
  ++stats_.rounds_applied;
  stats_.fresh_contributions += static_cast<uint64_t>(result.fresh_count());
  stats_.rank_rounds += static_cast<uint64_t>(result.ranks());
  const size_t age = std::min<size_t>(static_cast<size_t>(std::max(result.max_age(), 0)),
                                      stats_.staleness.size() - 1);
  ++stats_.staleness[age];
  stats_.applying += Clock::now() - start;
}

Result<int> EagerSgd::drain() {
  int n = 0;
  for (;;) {
    EC_ASSIGN_OR_RETURN(std::optional<RoundResult> r, pa_->poll());
    if (!r) return n;
    apply(*r);
    ++n;
  }
}

Status EagerSgd::step() {
  const auto entered = Clock::now();
  if (returned_once_) stats_.computing += entered - last_return_;
  ++stats_.steps;
  // The mean over the ranks the rounds run over now (fewer after a failure survived).
  const float scale = 1.0f / static_cast<float>(pa_->size());
  for (size_t i = 0; i < count_; ++i) grads_[i] *= scale;
  EC_RETURN_IF_ERROR(pa_->post(grads_, count_, DataType::kFloat32));
  // A post that missed its round is counted late whether it was carried or dropped.
  const PartialStats ps = pa_->stats();
  const uint64_t late = ps.late_posts + ps.dropped_posts;
  if (late > late_seen_) {
    ++stats_.late_posts;
  } else {
    ++stats_.fresh_posts;
  }
  late_seen_ = late;

  EC_ASSIGN_OR_RETURN(int applied, drain());
  if (applied == 0) {
    // Nothing completed since this rank's previous post: wait for the round its post is in.
    ++stats_.blocking_steps;
    const auto start = Clock::now();
    Result<RoundResult> r = pa_->wait(options_.timeout);
    stats_.waiting += Clock::now() - start;
    if (!r.ok()) return r.status();
    apply(r.value());
    EC_ASSIGN_OR_RETURN(applied, drain());
  }
  last_return_ = Clock::now();
  returned_once_ = true;
  return Status::Ok();
}

Status EagerSgd::finish() {
  const auto start = Clock::now();
  if (returned_once_) stats_.computing += start - last_return_;
  Result<uint64_t> flushed = pa_->flush([this](RoundResult&& r) { apply(r); });
  stats_.waiting += Clock::now() - start;
  last_return_ = Clock::now();
  returned_once_ = true;
  if (!flushed.ok()) return flushed.status();
  EC_DEBUG(kSgd, "eager SGD flushed at round %llu, %llu rounds applied",
           static_cast<unsigned long long>(flushed.value()),
           static_cast<unsigned long long>(stats_.rounds_applied));
  return Status::Ok();
}

}  // namespace eagercomm::sgd
