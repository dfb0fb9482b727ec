#include "collectives/partial_allreduce.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/collective_log.h"
#include "collectives/communicator.h"
#include "collectives/communicator_impl.h"
#include "collectives/engine/comm_core.h"
#include "collectives/kernels/reduce_kernels.h"
#include "collectives/partial/lateness_ledger.h"
#include "collectives/partial/partial_create.h"
#include "collectives/partial/partial_impl.h"
#include "collectives/partial/partial_meta.h"
#include "collectives/partial/partial_shared.h"
#include "collectives/partial/partial_stream.h"
#include "runtime/clock.h"
#include "runtime/config_table.h"
#include "runtime/deadline.h"
#include "runtime/gpu.h"

namespace eagercomm {

using detail::PartialEvent;
using detail::PartialShared;

// ---- modes ----

std::string PartialMode::name() const {
  switch (kind) {
    case PartialKind::kSync:
      return "sync";
    case PartialKind::kSolo:
      return "solo";
    case PartialKind::kMajority:
      return "majority";
    case PartialKind::kQuorum:
      return "quorum(" + std::to_string(quorum) + ")";
    case PartialKind::kAdaptive:
      return "adaptive";
    case PartialKind::kDeadline:
      return deadline.count() == 0 ? "deadline(auto)"
                                   : "deadline(" + format_duration(deadline) + ")";
  }
  return "?";
}

Result<PartialMode> parse_partial_mode(std::string_view text) {
  if (text == "sync") return PartialMode::sync();
  if (text == "solo") return PartialMode::solo();
  if (text == "majority") return PartialMode::majority();
  if (text == "adaptive") return PartialMode::adaptive();
  std::string_view rest;
  if (text.rfind("quorum:", 0) == 0) rest = text.substr(7);
  if (text.rfind("quorum(", 0) == 0 && text.back() == ')') rest = text.substr(7, text.size() - 8);
  if (!rest.empty() && rest.size() < 8 && rest.find_first_not_of("0123456789") == rest.npos) {
    return PartialMode::quorum_of(std::stoi(std::string(rest)));
  }
  std::string_view t;
  bool deadline = false;
  if (text.rfind("deadline:", 0) == 0) t = text.substr(9), deadline = true;
  if (text.rfind("deadline(", 0) == 0 && text.back() == ')') {
    t = text.substr(9, text.size() - 10), deadline = true;
  }
  if (deadline) {
    if (t == "auto") return PartialMode::deadline_auto();
    Result<std::chrono::nanoseconds> d = parse_duration(t);
    const auto us = d.ok() ? std::chrono::duration_cast<std::chrono::microseconds>(d.value())
                           : std::chrono::microseconds(0);
    if (!d.ok() || us.count() < 1 || us > PartialMode::kMaxDeadline) {
      return make_status(StatusCode::kInvalidArgument,
                         "partial allreduce mode '%.*s': the deadline must be 'auto' or a "
                         "duration from 1us to 1h ('500us', '5ms', '2s')",
                         static_cast<int>(text.size()), text.data());
    }
    return PartialMode::deadline_of(us);
  }
  return make_status(
      StatusCode::kInvalidArgument,
      "unknown partial allreduce mode '%.*s' (accepted: sync, solo, majority, adaptive, "
      "quorum:K, deadline:T with T a duration or auto)",
      static_cast<int>(text.size()), text.data());
}

Result<OnFailure> parse_on_failure(std::string_view text) {
  if (text == "fail") return OnFailure::kFail;
  if (text == "continue") return OnFailure::kContinue;
  return make_status(StatusCode::kInvalidArgument,
                     "on_failure '%.*s' is neither 'fail' nor 'continue'",
                     static_cast<int>(text.size()), text.data());
}

// ---- RoundResult ----

RoundResult::RoundResult(RoundResult&& o) noexcept { *this = std::move(o); }

RoundResult& RoundResult::operator=(RoundResult&& o) noexcept {
  if (this != &o) {
    release();
    round_ = o.round_;
    size_ = o.size_;
    data_ = o.data_;
    count_ = o.count_;
    type_ = o.type_;
    owner_ = std::move(o.owner_);
    buffer_ = o.buffer_;
    bytes_ = std::move(o.bytes_);
    o.data_ = nullptr;
  }
  return *this;
}

RoundResult::~RoundResult() { release(); }

void RoundResult::release() {
  if (owner_) owner_->recycle(buffer_);
  owner_.reset();
  bytes_.reset();
  data_ = nullptr;
}

RoundResult PartialAllreduce::result_in(std::shared_ptr<PartialShared> owner, uint32_t buffer,
                                        uint64_t round) {
  RoundResult r;
  r.round_ = round;
  r.size_ = owner->size;
  r.data_ = owner->buffers[buffer]->data();
  r.count_ = owner->count;
  r.type_ = owner->type;
  r.buffer_ = buffer;
  r.owner_ = std::move(owner);
  return r;
}

RoundResult PartialAllreduce::result_of(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                        uint64_t round, int size, size_t count, DataType type) {
  RoundResult r;
  r.round_ = round;
  r.size_ = size;
  r.data_ = bytes->data();
  r.count_ = count;
  r.type_ = type;
  r.bytes_ = std::move(bytes);
  return r;
}

Status RoundResult::copy_to(void* dst) const { return copy_to(dst, CudaStream{}); }

Status RoundResult::copy_to(void* dst, CudaStream stream) const {
  const size_t bytes = count_ * dtype_size(type_);
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr) return Status(StatusCode::kInvalidArgument, "RoundResult::copy_to(null)");
  if (data_ == nullptr) {
    return Status(StatusCode::kInvalidArgument, "RoundResult::copy_to() of a released result");
  }
  if (gpu::detected_kind(dst) == MemoryKind::kCuda) {
    EC_RETURN_IF_ERROR(gpu::check_usable("RoundResult::copy_to"));
    return gpu::copy_and_wait(dst, data_, bytes, stream.handle);
  }
  std::memcpy(dst, data_, bytes);
  return Status::Ok();
}

int RoundResult::fresh_count() const {
  int n = 0;
  for (int r = 0; r < size_; ++r) n += fresh(r);
  return n;
}
namespace {
detail::RankMeta meta_of(const void* data, size_t count, DataType type, int size, int rank) {
  if (data == nullptr) return {};
  const void* tail = static_cast<const uint8_t*>(data) + count * dtype_size(type);
  return detail::read_rank_meta(tail, type, size, rank, false);
}
}  // namespace

bool RoundResult::fresh(int rank) const { return meta_of(data_, count_, type_, size_, rank).fresh; }
int RoundResult::contributors() const {
  int n = 0;
  for (int r = 0; r < size_; ++r) n += posts(r) > 0;
  return n;
}
int RoundResult::age(int rank) const { return meta_of(data_, count_, type_, size_, rank).age; }
int RoundResult::max_age() const {
  int m = 0;
  for (int r = 0; r < size_; ++r) m = std::max(m, age(r));
  return m;
}
int RoundResult::posts(int rank) const { return meta_of(data_, count_, type_, size_, rank).posts; }

PartialAllreduce::PartialAllreduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PartialAllreduce::~PartialAllreduce() { destroy(); }

Result<std::unique_ptr<PartialAllreduce>> PartialAllreduce::create(Communicator& comm, size_t count,
                                                                   DataType type, PartialMode mode,
                                                                   const PartialOptions& options) {
  std::shared_ptr<detail::CommCore> core = Communicator::Impl::of(comm).core;
  if (core->destroyed()) return Status(StatusCode::kAborted, "the communicator was destroyed");
  const int P = core->size();
  const int rank = core->rank();
  log_set_thread_rank(rank);

  const uint32_t stream = core->new_stream_id();
  EC_RETURN_IF_ERROR(detail::agree_on_partial_arguments(*core, count, type, mode, options, stream));

  EC_ASSIGN_OR_RETURN(std::shared_ptr<PartialShared> shared,
                      PartialShared::make(core, stream, count, type, mode, options));
  EC_ASSIGN_OR_RETURN(
      shared->round_boxes,
      detail::make_partial_round_boxes(*core, shared->bytes, shared->bytes + shared->tail_bytes));
  std::unique_ptr<PartialAllreduce> pa(new PartialAllreduce(std::make_unique<Impl>(core, shared)));
  pa->impl_->ledger_ = std::make_unique<detail::LatenessLedger>(P);
  if (options.on_failure == OnFailure::kContinue) {
    pa->impl_->comm_ = &comm;
    pa->impl_->generation_ = comm.generation();
    Communicator::Impl::of(comm).continuing.push_back(pa->impl_.get());
  }
  pa->impl_->stream_ = std::make_unique<detail::PartialStream>(*core, shared);
  EC_RETURN_IF_ERROR(core->attach_stream(stream, pa->impl_->stream_.get()));
  // Rounds need every rank's engine while its application computes.
  if (core->config().progress_thread == ProgressThreadMode::kAuto) core->engine().start_thread();
  EC_INFO(kPartial,
          "partial allreduce %u: %zu x %s, mode %s, %s, sync_every %u, result_depth %u, rounds %s",
          stream, count, std::string(dtype_name(type)).c_str(), mode.name().c_str(),
          options.late == LatePolicy::kCarry ? "carry" : "drop", options.sync_every,
          options.result_depth, shared->round_boxes ? "through boxes" : "as messages");
  return pa;
}

// ---- posting ----

Status PartialAllreduce::post(const void* gradient, size_t count, DataType type) {
  return post(gradient, count, type, CudaStream{});
}

Status PartialAllreduce::post(const void* gradient, size_t count, DataType type,
                              CudaStream stream) {
  // on_failure=continue: a post after a failure goes to the survivors' new group.
  if (impl_->shared_->broken.load(std::memory_order_acquire) &&
      !impl_->shared_->closed.load(std::memory_order_acquire) &&
      impl_->continues_after(impl_->shared_->error)) {
    EC_RETURN_IF_ERROR(impl_->recover());
  }
  PartialShared& s = *impl_->shared_;
  if (s.closed.load(std::memory_order_acquire)) {
    return Status(StatusCode::kAborted, "partial allreduce: post() after destroy()");
  }
  if (count != s.count || type != s.type) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: post() of %zu x %s, but the object holds %zu x %s",
                       count, std::string(dtype_name(type)).c_str(), s.count,
                       std::string(dtype_name(s.type)).c_str());
  }
  if (gradient == nullptr && count > 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: post() of a null gradient with count %zu", count);
  }
  if (s.broken.load(std::memory_order_acquire)) {
    // Broken since the check above (on_failure=continue): that check now takes it over.
    if (impl_->continues_after(s.error)) return post(gradient, count, type, stream);
    return s.error;
  }
  // Two threads adding into the open buffer at once would tear it: refuse instead.
  if (impl_->posting_.exchange(true, std::memory_order_acquire)) {
    return Status(StatusCode::kInvalidArgument,
                  "partial allreduce: post() called from two threads at once");
  }
  struct Unmark {
    std::atomic<bool>& flag;
    ~Unmark() { flag.store(false, std::memory_order_release); }
  } unmark{impl_->posting_};
  // adaptive: the compute before this post (RankMeta::compute_us); the next one is measured from
  // when this call returns. Other modes read no clock.
  const bool adaptive = s.mode.kind == PartialKind::kAdaptive;
  const bool measured = adaptive && impl_->measure_next_;
  const uint64_t compute_us = measured ? static_cast<uint64_t>(std::max<int64_t>(
                                             std::chrono::duration_cast<std::chrono::microseconds>(
                                                 RuntimeClock::now() - impl_->idle_since_)
                                                 .count(),
                                             0))
                                       : 0;
  struct RestartCompute {
    Impl& pa;
    bool on;
    ~RestartCompute() {
      if (!on) return;
      pa.idle_since_ = RuntimeClock::now();
      pa.measure_next_ = true;
    }
  } restart{*impl_, adaptive};
  // A device gradient: copied out before entering the open buffer, so the engine never waits on
  // a CUDA copy for the writer count to drop.
  if (count > 0 && gpu::detected_kind(gradient) == MemoryKind::kCuda) {
    EC_RETURN_IF_ERROR(gpu::check_usable("partial allreduce post"));
    impl_->device_stage_.resize(s.bytes);
    EC_RETURN_IF_ERROR(
        gpu::copy_and_wait(impl_->device_stage_.data(), gradient, s.bytes, stream.handle));
    gradient = impl_->device_stage_.data();
  }

  const uint64_t base = impl_->consumed_;
  uint64_t round = 0;
  bool late = false;
  for (;;) {
    const uint64_t open = s.open.load(std::memory_order_seq_cst);
    detail::ContributionBuffer& buf = *s.buffers[PartialShared::open_buffer(open)];
    buf.writers.fetch_add(1, std::memory_order_seq_cst);
    if (s.open.load(std::memory_order_seq_cst) != open) {
      buf.writers.fetch_sub(1, std::memory_order_release);
      continue;  // the round activated meanwhile: post into the next one
    }
    round = PartialShared::open_round(open);
    late = base != round;
    if (late && s.options.late == LatePolicy::kDrop) {
      buf.writers.fetch_sub(1, std::memory_order_release);
      s.dropped_posts.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    if (buf.posts == 0) {
      std::memcpy(buf.data(), gradient, s.bytes);  // the buffer is zero: adding is copying
    } else {
      reduce(s.type, ReduceOp::kSum, buf.data(), buf.data(), gradient, count);
    }
    ++buf.posts;
    if (measured) {
      buf.compute_us += compute_us;
      ++buf.measured;
    }
    buf.fresh |= !late;
    buf.min_base = std::min(buf.min_base, base);
    buf.writers.fetch_sub(1, std::memory_order_seq_cst);
    break;
  }
  s.posts.fetch_add(1, std::memory_order_relaxed);
  if (late) s.late_posts.fetch_add(1, std::memory_order_relaxed);
  impl_->last_post_round_ = round;

  // The engine decides what the post sets off (it knows which ranks are flushing); the kick
  // also wakes an engine waiting for this post to leave a buffer it just took.
  impl_->push_event(PartialEvent{PartialEvent::Kind::kPosted, round, !late, 0});
  return Status::Ok();
}

void PartialAllreduce::Impl::push_event(const detail::PartialEvent& event) {
  while (!shared_->events.try_push(event)) {
    core_->engine().kick();
    std::this_thread::yield();
  }
  core_->engine().kick();
}

// ---- results ----

std::optional<RoundResult> PartialAllreduce::Impl::take() {
  if (!pending_.empty()) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    hold(p.result, p.bytes);
    taken_ = p.result.round() + 1;
    return std::move(p.result);
  }
  PartialShared& s = *shared_;
  detail::RoundRecord record;
  bool got = s.results.try_pop(record);
  if (!got && !core_->engine().has_thread()) {
    core_->engine().try_progress();
    got = s.results.try_pop(record);
  }
  if (!got) return std::nullopt;
  RoundResult r = result_in(shared_, record.buffer, round_base_ + record.round);
  ++consumed_;
  taken_ = r.round() + 1;
  if (comm_) hold(r, s.bytes + s.tail_bytes);
  return r;
}

void PartialAllreduce::Impl::hold(const RoundResult& r, size_t bytes) {
  // Enough for any survivor: one that missed a round had entered it, so it is at most
  // result_depth + 1 rounds behind the round (partial_recovery.cc).
  const size_t keep = shared_->options.result_depth + 2;
  Held h;
  if (held_.size() >= keep) {
    h = std::move(held_.front());  // its buffer is reused
    held_.pop_front();
  }
  h.round = r.round();
  const auto* data = static_cast<const uint8_t*>(r.data());
  h.bytes.assign(data, data + bytes);
  held_.push_back(std::move(h));
}

Result<std::optional<RoundResult>> PartialAllreduce::poll() {
  if (impl_->shared_->closed.load(std::memory_order_acquire)) {
    return Status(StatusCode::kAborted, "partial allreduce: poll() after destroy()");
  }
  log_set_thread_rank(impl_->shared_->rank);  // it may drive the engine, as wait() does
  for (;;) {
    // Read before taking: every result before a failure is queued before the failure is
    // published, so a failure seen here leaves no result behind once take() finds none.
    const bool broken = impl_->shared_->broken.load(std::memory_order_acquire);
    if (std::optional<RoundResult> r = impl_->take()) {
      const PartialShared& s = *impl_->shared_;
      // The ledger follows the current group: results of a group that a failure shrank are not
      // in it.
      if (r->ranks() != impl_->ledger_->ranks()) return r;
      const auto* tail =
          static_cast<const uint8_t*>(r->data()) + r->count() * dtype_size(r->type());
      impl_->ledger_->account(r->round(), tail, r->type(), RuntimeClock::now());
      const uint32_t every = impl_->core_->config().straggler_report;
      if (every > 0 && s.rank == 0 && impl_->ledger_->rounds() % every == 0) {
        const std::string report = impl_->ledger_->window_report();
        if (report.find("persistent stragglers") != std::string::npos) {
          EC_WARN(kPartial, "partial allreduce %u: %s", s.stream, report.c_str());
        } else {
          EC_INFO(kPartial, "partial allreduce %u: %s", s.stream, report.c_str());
        }
      }
      return r;
    }
    if (!broken) return std::optional<RoundResult>();
    const PartialShared& s = *impl_->shared_;
    if (!impl_->continues_after(s.error) || impl_->flush_spares_failure()) return s.error;
    EC_RETURN_IF_ERROR(impl_->recover());
  }
}

Result<RoundResult> PartialAllreduce::wait(std::chrono::nanoseconds timeout) {
  return wait(timeout, nullptr);
}

Result<RoundResult> PartialAllreduce::wait(std::chrono::nanoseconds timeout,
                                           const std::function<Status()>& check) {
  constexpr std::chrono::milliseconds kCheckEvery{50};
  log_set_thread_rank(impl_->shared_->rank);
  // adaptive: time spent waiting here is not the application's compute (post() measures that).
  struct RestartCompute {
    std::chrono::steady_clock::time_point& since;
    bool on;
    ~RestartCompute() {
      if (on) since = RuntimeClock::now();
    }
  } restart{impl_->idle_since_, impl_->shared_->mode.kind == PartialKind::kAdaptive};
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "partial allreduce wait"));
  timeout =
      timeout == kConfiguredTimeout ? impl_->configured_wait() : impl_->core_->resolve(timeout);
  auto deadline = deadline_after(timeout);
  for (;;) {
    const uint32_t generation = impl_->generation_;
    EC_ASSIGN_OR_RETURN(std::optional<RoundResult> r, poll());
    if (r) return std::move(*r);
    PartialShared& s = *impl_->shared_;  // poll() may have moved on to a new group
    // A recovery inside poll() spent time that is not the new group's: the wait starts afresh
    // there, or a survivor whose recovery outlasted the rest of the timeout failed at once.
    if (impl_->generation_ != generation) deadline = deadline_after(timeout);
    // A rank that waits having taken every result so far, with its posts in the open round,
    // has arrived at that round even if those posts were late when made (several posts before
    // taking a result): count it as arrived, or the round could wait for a post that never
    // comes.
    const uint64_t open_round = PartialShared::open_round(s.open.load(std::memory_order_acquire));
    if (open_round == impl_->consumed_ && impl_->last_post_round_ == open_round &&
        impl_->arrived_round_ != open_round) {
      impl_->arrived_round_ = open_round;
      impl_->push_event(
          PartialEvent{.kind = PartialEvent::Kind::kPosted, .round = open_round, .fresh = true});
    }
    const bool ready = impl_->core_->engine().wait(
        [&s] {
          return s.results.size_approx() > 0 || s.broken.load(std::memory_order_acquire) ||
                 s.closed.load(std::memory_order_acquire);
        },
        check ? std::min(deadline, deadline_after(kCheckEvery)) : deadline);
    if (!ready && check && RuntimeClock::now() < deadline) {
      Status stop = check();
      if (stop.ok()) continue;
      impl_->last_timeout_ = "partial allreduce: rank " + std::to_string(s.rank) +
                             " stopped waiting for round " + std::to_string(impl_->taken_) + ": " +
                             stop.message();
      return stop;
    }
    if (!ready) {
      Status late =
          make_status(StatusCode::kTimeout,
                      "partial allreduce: round %llu did not complete on rank %d within %s%s",
                      static_cast<unsigned long long>(impl_->taken_), s.rank,
                      format_duration(timeout).c_str(), impl_->core_->silent_report().c_str());
      impl_->last_timeout_ = late.message();  // the peers hear it if this rank then gives up
      return late;
    }
  }
}

Result<RoundResult> PartialAllreduce::wait() { return wait(kConfiguredTimeout); }

Result<uint64_t> PartialAllreduce::flush(const std::function<void(RoundResult&&)>& apply) {
  if (impl_->shared_->closed.load(std::memory_order_acquire)) {
    return Status(StatusCode::kAborted, "partial allreduce: flush() after destroy()");
  }
  log_set_thread_rank(impl_->shared_->rank);
  impl_->measure_next_ = false;  // what follows a flush (evaluation, say) is not a step's compute
  const uint64_t number = impl_->flushes_done_ + 1;
  impl_->flushing_ = number;
  struct Leave {
    Impl& pa;
    ~Leave() { pa.flushing_ = 0; }
  } leave{*impl_};
  for (;;) {
    EC_ASSIGN_OR_RETURN(std::optional<uint64_t> round, flush_in_group(number, apply));
    if (!round && impl_->resolved_flush_round_) {
      // A survivor's flush returned before the failure: its round ends this one too, and its
      // results are among those passed on.
      round = *impl_->resolved_flush_round_;
      impl_->resolved_flush_round_.reset();
      while (impl_->taken_ <= *round) {
        EC_ASSIGN_OR_RETURN(RoundResult r, wait());
        if (apply) apply(std::move(r));
      }
    }
    if (round) {
      impl_->flushes_done_ = number;
      impl_->last_flush_round_ = *round;
      return *round;
    }
    // The group changed (a failure survived, on_failure=continue): flush again in the new one.
  }
}

Result<std::optional<uint64_t>> PartialAllreduce::flush_in_group(
    uint64_t number, const std::function<void(RoundResult&&)>& apply) {
  Impl& im = *impl_;
  const std::shared_ptr<PartialShared> shared = im.shared_;  // this group's
  PartialShared& s = *shared;
  std::shared_ptr<detail::CommCore> core = im.core_;
  const uint64_t local = number - im.flush_base_;  // the flush's number in this group
  // Ranks still in their loop must not wait for this one's posts any more.
  im.push_event(PartialEvent{.kind = PartialEvent::Kind::kFlushing, .round = local});
  // Every post of every rank precedes that rank's read below and lands in a round no later than
  // the round open then, so no later than the maximum over ranks: that round, forced active
  // everywhere, closes the books. The exchange runs while results keep flowing. (The open
  // round, not `activated`: the engine publishes that after opening the next round, and a post
  // may already sit in the new round.)
  auto last = std::make_shared<int64_t>(
      static_cast<int64_t>(PartialShared::open_round(s.open.load(std::memory_order_seq_cst))));
  detail::OpSignature sig;
  sig.coll = static_cast<uint8_t>(detail::CollKind::kAllreduce);
  sig.dtype = static_cast<uint8_t>(DataType::kInt64);
  sig.redop = static_cast<uint8_t>(ReduceOp::kMax);
  sig.count = 1;
  sig.reserved = static_cast<uint8_t>(detail::Algo::kRecursiveDoubling);
  sig.root = detail::kPartialFlushTag;  // errors name flush(), not this allreduce
  std::shared_ptr<detail::Op> exchange = detail::make_allreduce(sig, last.get(), last.get());
  exchange->keep_alive = last;
  if (core->destroyed()) return Status(StatusCode::kAborted, "the communicator was destroyed");
  s.flushes_joined.store(local, std::memory_order_release);
  core->submit(exchange);
  // A failure from round b on fails this flush only if its round is b or later. When it comes
  // from peers that left after joining this exchange (their flush returned, so its round is
  // before b), the round is known once the exchange ends: wait for it before deciding.
  auto spared = [&s, local] {
    return s.failure_spares_flush.load(std::memory_order_acquire) >= local;
  };

  std::optional<uint64_t> round;  // in this group's numbering
  bool exchange_failed = false;   // with a failure this object continues through
  const auto timeout = im.configured_wait();
  for (;;) {
    if (!round && !exchange_failed && exchange->done()) {
      if (exchange->status().ok()) {
        round = static_cast<uint64_t>(*last);
        im.push_event(
            PartialEvent{.kind = PartialEvent::Kind::kForce, .round = *round, .flush = local});
      } else if (im.continues_after(exchange->status())) {
        exchange_failed = true;  // the rounds fail too: poll() moves on to the new group
      } else {
        return exchange->status();
      }
    }
    if (round && im.taken_ > im.round_base_ + *round) {
      return std::optional<uint64_t>(im.round_base_ + *round);
    }
    // Until the exchange ends, a failure it spares starts no recovery (exchanging_flush_); once
    // its round is known, the results before the failure cover it.
    im.exchanging_flush_ = !round && !exchange_failed ? local : 0;
    Result<std::optional<RoundResult>> polled = poll();
    im.exchanging_flush_ = 0;
    if (im.shared_ != shared) {  // poll() moved on to a new group
      // ... unless the recovery failed after this object's part (another object's restart).
      if (!polled.ok()) return polled.status();
      if (polled.value() && apply) apply(std::move(*polled.value()));
      return std::optional<uint64_t>();
    }
    if (!polled.ok()) {
      if (round || !spared() || exchange_failed) return polled.status();
    } else if (std::optional<RoundResult>& r = polled.value()) {
      if (apply) apply(std::move(*r));
      continue;
    }
    const auto deadline = deadline_after(timeout);
    const bool ready = core->engine().wait(
        [&] {
          return s.results.size_approx() > 0 ||
                 (s.broken.load(std::memory_order_acquire) &&
                  (round || !spared() || exchange_failed)) ||
                 (!round && !exchange_failed && exchange->done());
        },
        deadline);
    if (!ready) {
      return make_status(StatusCode::kTimeout,
                         "partial allreduce: flush on rank %d made no progress within %s "
                         "(waiting for %s)",
                         s.rank, format_duration(timeout).c_str(),
                         round ? "the flush round" : "every rank to call flush()");
    }
  }
}

// ---- teardown and introspection ----

void PartialAllreduce::destroy() {
  if (!impl_->shared_ || impl_->shared_->closed.exchange(true, std::memory_order_acq_rel)) return;
  if (impl_->comm_ != nullptr)
    std::erase(Communicator::Impl::of(*impl_->comm_).continuing, impl_.get());
  ScopedLogRank scoped(
      impl_->shared_->rank);  // a destructor runs on any thread (CommCore::destroy)
  detail::PartialStream* stream = impl_->stream_.get();
  // A rank that leaves after a timeout tells the peers what it was waiting for: their errors
  // then name the rank that held everybody up, not only this messenger.
  const Status why(StatusCode::kAborted,
                   impl_->last_timeout_.empty()
                       ? std::string("partial allreduce: destroyed")
                       : "partial allreduce: destroyed after: " + impl_->last_timeout_);
  std::string stopped;  // what peers' rounds that still reach this rank are told
  impl_->core_->engine().run_exclusive([stream, &why, &stopped] {
    stream->close(why);
    stopped = stream->failure().message();
  });
  impl_->core_->detach_stream(impl_->shared_->stream, std::move(stopped));
  impl_->core_->engine().notify_waiters();
}

PartialStats PartialAllreduce::stats() const {
  const PartialShared& s = *impl_->shared_;
  PartialStats out;
  out.posts = s.posts.load(std::memory_order_relaxed);
  out.late_posts = s.late_posts.load(std::memory_order_relaxed);
  out.dropped_posts = s.dropped_posts.load(std::memory_order_relaxed);
  out.rounds_activated = s.activated.load(std::memory_order_relaxed);
  out.rounds_delivered = s.delivered.load(std::memory_order_relaxed);
  out.rounds_in_boxes = s.round_boxes != nullptr;
  out.posts += impl_->before_.posts;
  out.late_posts += impl_->before_.late_posts;
  out.dropped_posts += impl_->before_.dropped_posts;
  out.rounds_activated += impl_->before_.rounds_activated;
  out.rounds_delivered += impl_->before_.rounds_delivered;
  return out;
}

std::vector<RankLateness> PartialAllreduce::lateness() const { return impl_->ledger_->totals(); }

size_t PartialAllreduce::count() const { return impl_->shared_->count; }
DataType PartialAllreduce::type() const { return impl_->shared_->type; }
PartialMode PartialAllreduce::mode() const { return impl_->shared_->mode; }
int PartialAllreduce::rank() const { return impl_->shared_->rank; }
int PartialAllreduce::size() const { return impl_->shared_->size; }

}  // namespace eagercomm
