// PartialAllreduce with on_failure=continue: going on after a peer died or was declared hung
// (docs/ARCHITECTURE.md, "Continuing through a failure").
//
// Every survivor decides the same thing whatever it had seen, through the bootstrap store (the
// one party every survivor still reaches):
//   1. This rank's group stops: its stream closes, the results it had queued are kept for the
//      application, and it counts D_s, the rounds it delivered.
//   2. The communicator shrinks to the survivors (Communicator::shrink(); a second object of the
//      same communicator finds it shrunk already and joins that group).
//   3. Under "<shrink's keys>/partial<stream>/" each survivor publishes D_s and its flushes;
//      D = max D_s. Rounds deliver in order and every rank's result of a round is the same sum,
//      so rounds below D are complete on at least one survivor: the first such survivor (in rank
//      order) publishes the results of rounds min D_s .. D - 1 and the others take those they
//      miss. A round at or after D completed nowhere: its contributions are in no result. So the
//      dead rank's last contribution (in a round below D, or none) is in every survivor's results
//      or in none.
//   4. A survivor's own contributions to rounds at or after D (copies kept when its rounds
//      started) and its open contribution go into the new group's first open round: nothing a
//      survivor posted is lost (conservation over the survivors' posts).
//   5. A new incarnation runs over the shrunk communicator, with the same stream id (kept free
//      by shrink()), its rounds numbered on from D. Rounds exchange as messages (round boxes
//      would take another collective exchange).
// The gap min D_s .. D is at most result_depth + 1 rounds: a survivor that missed round r had
// entered r (every rank contributes to every round), and a rank enters at most result_depth + 1
// rounds beyond what it delivered, so the copies held_ keeps are enough.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/collective_log.h"
#include "collectives/communicator_impl.h"
#include "collectives/engine/comm_core.h"
#include "collectives/kernels/reduce_kernels.h"
#include "collectives/partial/partial_impl.h"
#include "runtime/store.h"

namespace eagercomm {

using detail::PartialShared;

namespace {

struct SurvivorState {
  uint64_t delivered = 0;  // rounds this rank delivered (global numbers)
  uint64_t flushes_done = 0;
  uint64_t last_flush_round = 0;
};

Bytes encode(const SurvivorState& s) {
  Bytes b(sizeof(s));
  std::memcpy(b.data(), &s, sizeof(s));
  return b;
}

Result<SurvivorState> decode(const Bytes& b, const std::string& key) {
  SurvivorState s;
  if (b.size() != sizeof(s)) {
    return make_status(StatusCode::kInternal, "partial allreduce: store key %s holds %zu bytes",
                       key.c_str(), b.size());
  }
  std::memcpy(&s, b.data(), sizeof(s));
  return s;
}

}  // namespace

bool PartialAllreduce::Impl::continues_after(const Status& failure) const {
  // A peer's failure, or the communicator shrunk under the object (the application's shrink()
  // after a collective met the failure first destroyed the engine the rounds ran on).
  return comm_ != nullptr && (failure.code() == StatusCode::kPeerFailed ||
                              Communicator::Impl::of(*comm_).generation != generation_);
}

// What one object's recovery carries from phase to phase.
struct PartialAllreduce::Impl::Recovery {
  std::shared_ptr<PartialShared> old;
  std::vector<detail::PartialStream::Orphan> orphans;
  uint64_t delivered = 0;  // global
  size_t result_bytes = 0;
  std::string prefix;  // this object's keys under the new generation
  uint64_t most = 0, least = 0, flushes = 0, flush_round = 0;
  int donor = -1;
};

Status PartialAllreduce::Impl::recover() {
  Communicator::Impl& ci = Communicator::Impl::of(*comm_);
  const uint32_t from = generation_;
  if (ci.generation == from) {
    EC_WARN(kPartial, "partial allreduce %u: %s; continuing with the survivors", shared_->stream,
            shared_->error.message().c_str());
    Result<std::vector<int>> shrunk = comm_->shrink();
    if (!shrunk.ok()) {
      EC_ERROR(kPartial, "partial allreduce %u: cannot continue after the failure: %s",
               shared_->stream, shrunk.status().to_string().c_str());
      return shrunk.status();
    }
  } else if (ci.generation != from + 1) {
    return make_status(StatusCode::kPeerFailed,
                       "partial allreduce %u: the communicator was shrunk %u times since this "
                       "object's rounds last ran; it cannot tell which rounds the survivors hold",
                       shared_->stream, ci.generation - from);
  }
  // Every object of the communicator that continues goes over now, phase by phase: each phase
  // waits only for what the members' previous phases published, so ranks that meet the objects
  // in different orders cannot wait for each other (partial_impl.h: one thread uses them).
  std::vector<Impl*> group;
  for (detail::ContinuingObject* c : ci.continuing) {
    auto* o = static_cast<Impl*>(c);
    if (o->generation_ == from) group.push_back(o);
  }
  std::vector<Recovery> rec(group.size());
  for (size_t i = 0; i < group.size(); ++i) EC_RETURN_IF_ERROR(group[i]->stop(ci, rec[i]));
  for (size_t i = 0; i < group.size(); ++i) EC_RETURN_IF_ERROR(group[i]->settle(ci, rec[i]));
  for (size_t i = 0; i < group.size(); ++i) EC_RETURN_IF_ERROR(group[i]->restart(ci, rec[i]));
  return Status::Ok();
}

// 1. This object's old group stops here; it publishes what it delivered.
Status PartialAllreduce::Impl::stop(Communicator::Impl& ci, Recovery& rec) {
  rec.old = shared_;
  PartialShared& old = *rec.old;
  // The engine the rounds ran on was destroyed by the shrink: the stream closed with it, and
  // its error may say only that.
  const Status cause = old.broken.load(std::memory_order_acquire)
                           ? old.error
                           : Status(StatusCode::kPeerFailed, "the communicator was shrunk");
  rec.result_bytes = old.bytes + old.tail_bytes;
  detail::PartialStream* stream = stream_.get();
  core_->engine().run_exclusive([&] {
    stream->close(cause);
    rec.orphans = stream->orphans();
  });
  core_->detach_stream(old.stream, cause.message());
  detail::RoundRecord record;
  while (old.results.try_pop(record)) {
    pending_.push_back(
        Pending{result_in(rec.old, record.buffer, round_base_ + record.round), rec.result_bytes});
  }
  rec.delivered = round_base_ + old.delivered.load(std::memory_order_acquire);
  rec.prefix = ci.shrink_prefix + "partial" + std::to_string(old.stream) + "/";
  const SurvivorState mine{rec.delivered, flushes_done_, last_flush_round_};
  return ci.bootstrap->set(rec.prefix + "state/" + std::to_string(old.rank), encode(mine));
}

// 2. Who delivered what: the first survivor that delivered the most publishes what others miss.
Status PartialAllreduce::Impl::settle(Communicator::Impl& ci, Recovery& rec) {
  const PartialShared& old = *rec.old;
  Store& store = *ci.bootstrap;
  const std::chrono::nanoseconds timeout =
      ci.core->config().timeout.count() > 0 ? ci.core->config().timeout : kWaitForever;
  rec.least = UINT64_MAX;
  for (int m : ci.members) {
    const std::string key = rec.prefix + "state/" + std::to_string(m);
    EC_ASSIGN_OR_RETURN(Bytes b, store.get(key, timeout));
    EC_ASSIGN_OR_RETURN(SurvivorState theirs, decode(b, key));
    if (rec.donor < 0 || theirs.delivered > rec.most) rec.donor = m;
    rec.most = std::max(rec.most, theirs.delivered);
    rec.least = std::min(rec.least, theirs.delivered);
    if (theirs.flushes_done > rec.flushes) {
      rec.flushes = theirs.flushes_done;
      rec.flush_round = theirs.last_flush_round;
    }
  }
  if (rec.donor != old.rank) return Status::Ok();
  for (uint64_t r = rec.least; r < rec.most; ++r) {
    const uint8_t* data = nullptr;
    for (const Pending& p : pending_) {
      if (p.result.round() == r) data = static_cast<const uint8_t*>(p.result.data());
    }
    for (const Held& h : held_) {
      if (h.round == r && h.bytes.size() == rec.result_bytes) data = h.bytes.data();
    }
    if (data == nullptr) {
      return make_status(StatusCode::kInternal,
                         "partial allreduce %u: round %llu's result is no longer held here",
                         old.stream, static_cast<unsigned long long>(r));
    }
    EC_RETURN_IF_ERROR(
        store.set(rec.prefix + "round/" + std::to_string(r), Bytes(data, data + rec.result_bytes)));
  }
  return Status::Ok();
}

// 3. The results this rank missed, its contributions that no result holds, the new incarnation.
Status PartialAllreduce::Impl::restart(Communicator::Impl& ci, Recovery& rec) {
  const PartialShared& old = *rec.old;
  const std::chrono::nanoseconds timeout =
      ci.core->config().timeout.count() > 0 ? ci.core->config().timeout : kWaitForever;
  // Queued for the application only once the new incarnation stands: a restart that fails
  // leaves pending_ as it was, and a recovery tried again fetches them again.
  std::vector<Pending> missed;
  for (uint64_t r = rec.delivered; r < rec.most; ++r) {
    const std::string key = rec.prefix + "round/" + std::to_string(r);
    EC_ASSIGN_OR_RETURN(Bytes b, ci.bootstrap->get(key, timeout));
    if (b.size() != rec.result_bytes) {
      return make_status(StatusCode::kInternal,
                         "partial allreduce %u: store key %s holds %zu bytes, round %llu's "
                         "result is %zu",
                         old.stream, key.c_str(), b.size(), static_cast<unsigned long long>(r),
                         rec.result_bytes);
    }
    auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(b));
    missed.push_back(
        Pending{result_of(std::move(bytes), r, old.size, old.count, old.type), rec.result_bytes});
  }
  // A flush that returned on a survivor before the failure ends here at its round (every rank
  // was in it, so this one is, or has returned from it too).
  if (flushing_ > flushes_done_ && flushing_ <= rec.flushes)
    resolved_flush_round_ = rec.flush_round;
  flush_base_ = rec.flushes;

  std::shared_ptr<detail::CommCore> core = ci.core;
  PartialMode mode = old.mode;
  if (mode.kind == PartialKind::kQuorum) mode.quorum = std::min(mode.quorum, core->size());
  EC_ASSIGN_OR_RETURN(
      std::shared_ptr<PartialShared> shared,
      PartialShared::make(core, old.stream, old.count, old.type, mode, old.options));
  detail::ContributionBuffer& carry = *shared->buffers[0];
  auto add = [&](const void* data, uint32_t posts) {
    if (carry.posts == 0) {
      std::memcpy(carry.data(), data, old.bytes);
    } else {
      reduce(old.type, ReduceOp::kSum, carry.data(), carry.data(), data, old.count);
    }
    carry.posts += posts;
    carry.min_base = 0;
  };
  for (const detail::PartialStream::Orphan& o : rec.orphans) {
    if (round_base_ + o.round >= rec.most) add(o.data, o.posts);
  }
  const detail::ContributionBuffer& open =
      *old.buffers[PartialShared::open_buffer(old.open.load(std::memory_order_acquire))];
  if (open.posts > 0) add(open.data(), open.posts);
  const uint32_t carried = carry.posts;

  auto next = std::make_unique<detail::PartialStream>(*core, shared);
  EC_RETURN_IF_ERROR(core->attach_stream(old.stream, next.get()));
  for (Pending& p : missed) pending_.push_back(std::move(p));
  before_.posts += old.posts.load(std::memory_order_relaxed);
  before_.late_posts += old.late_posts.load(std::memory_order_relaxed);
  before_.dropped_posts += old.dropped_posts.load(std::memory_order_relaxed);
  before_.rounds_activated = rec.most;
  before_.rounds_delivered = rec.most;
  stream_ = std::move(next);
  shared_ = std::move(shared);
  core_ = core;
  round_base_ = rec.most;
  consumed_ = 0;
  // Carried posts sit in the open round as this rank's: a wait() now counts as its arrival
  // there, as after a post, or every survivor could wait for a round nobody sets off.
  last_post_round_ = carried > 0 ? 0 : UINT64_MAX;
  arrived_round_ = UINT64_MAX;
  generation_ = ci.generation;
  ledger_ = std::make_unique<detail::LatenessLedger>(core->size());
  if (core->config().progress_thread == ProgressThreadMode::kAuto) core->engine().start_thread();
  EC_WARN(kPartial,
          "partial allreduce %u: continuing with %d of %d ranks from round %llu (rank %d is now "
          "rank %d; it had delivered %llu rounds, took %llu from rank %d, carries %u posts)",
          old.stream, core->size(), old.size, static_cast<unsigned long long>(rec.most), old.rank,
          core->rank(), static_cast<unsigned long long>(rec.delivered),
          static_cast<unsigned long long>(rec.most - rec.delivered), rec.donor, carried);
  return Status::Ok();
}

}  // namespace eagercomm
