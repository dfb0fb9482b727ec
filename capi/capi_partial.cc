// The C API's partial allreduce (eagercomm.h).
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "capi/capi_internal.h"

namespace eagercomm::capi {
namespace {

Result<PartialMode> to_mode(const ec_partial_options& o) {
  switch (static_cast<int>(o.mode) & ~EC_PARTIAL_CONTINUE_ON_FAILURE) {
    case EC_PARTIAL_SYNC:
      return PartialMode::sync();
    case EC_PARTIAL_SOLO:
      return PartialMode::solo();
    case EC_PARTIAL_MAJORITY:
      return PartialMode::majority();
    case EC_PARTIAL_QUORUM:
      return PartialMode::quorum_of(o.quorum);
    case EC_PARTIAL_ADAPTIVE:
      return PartialMode::adaptive();
    case EC_PARTIAL_DEADLINE:
      return o.deadline_us == 0
                 ? PartialMode::deadline_auto()
                 : PartialMode::deadline_of(std::chrono::microseconds(o.deadline_us));
  }
  return make_status(StatusCode::kInvalidArgument,
                     "options.mode %d is not an ec_partial_mode (EC_PARTIAL_SYNC .. "
                     "EC_PARTIAL_DEADLINE, 0 .. 5)",
                     static_cast<int>(o.mode));
}

Result<LatePolicy> to_late(ec_late_policy late) {
  switch (static_cast<int>(late)) {
    case EC_LATE_CARRY:
      return LatePolicy::kCarry;
    case EC_LATE_DROP:
      return LatePolicy::kDrop;
  }
  return make_status(StatusCode::kInvalidArgument,
                     "options.late %d is not an ec_late_policy (EC_LATE_CARRY, EC_LATE_DROP)",
                     static_cast<int>(late));
}

ec_round_info info_of(const RoundResult& r) {
  ec_round_info info{};
  info.round = r.round();
  info.fresh_count = r.fresh_count();
  info.contributors = r.contributors();
  info.max_age = r.max_age();
  return info;
}

// Checked before a round is taken, so that a bad buffer never costs the caller a result.
Status check_result_buffer(const PartialAllreduce& pa, const void* result, size_t count) {
  if (count != pa.count()) {
    return make_status(StatusCode::kInvalidArgument,
                       "result buffer of %zu elements, but the partial allreduce holds %zu", count,
                       pa.count());
  }
  if (result == nullptr && count > 0) {
    return make_status(StatusCode::kInvalidArgument, "null result buffer with count %zu", count);
  }
  return Status::Ok();
}

void hand_back(const RoundResult& r, void* result, ec_round_info* info) {
  if (r.count() > 0) std::memcpy(result, r.data(), r.count() * dtype_size(r.type()));
  if (info != nullptr) *info = info_of(r);
}

}  // namespace
}  // namespace eagercomm::capi

using namespace eagercomm;
using namespace eagercomm::capi;

extern "C" {

void ec_partial_options_init(ec_partial_options* options) {
  if (options == nullptr) return;
  const PartialOptions defaults;
  *options = ec_partial_options{};
  options->mode = EC_PARTIAL_SOLO;
  options->quorum = 0;
  options->late = EC_LATE_CARRY;
  options->sync_every = defaults.sync_every;
  options->seed = defaults.seed;
  options->result_depth = defaults.result_depth;
  options->deadline_us = 0;
}

ec_status ec_partial_create(ec_comm* comm, size_t count, ec_dtype dtype,
                            const ec_partial_options* options, ec_partial** out) {
  return guarded("ec_partial_create", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "null output pointer");
    *out = nullptr;
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    EC_ASSIGN_OR_RETURN(DataType type, to_dtype(dtype));
    ec_partial_options o;
    ec_partial_options_init(&o);
    if (options != nullptr) o = *options;
    EC_ASSIGN_OR_RETURN(PartialMode mode, to_mode(o));
    PartialOptions popts;
    EC_ASSIGN_OR_RETURN(popts.late, to_late(o.late));
    popts.sync_every = o.sync_every;
    popts.seed = o.seed;
    popts.result_depth = o.result_depth;
    popts.on_failure = (static_cast<int>(o.mode) & EC_PARTIAL_CONTINUE_ON_FAILURE) != 0
                           ? OnFailure::kContinue
                           : OnFailure::kFail;
    // The C++ create() checks the ranges (and that every rank agrees) and names what is wrong.
    EC_ASSIGN_OR_RETURN(std::unique_ptr<PartialAllreduce> pa,
                        PartialAllreduce::create(*c, count, type, mode, popts));
    auto handle = std::make_unique<ec_partial>();
    handle->pa = std::move(pa);
    *out = handle.release();
    return Status::Ok();
  });
}

ec_status ec_partial_post_on_stream(ec_partial* pa, const void* gradient, size_t count,
                                    ec_dtype dtype, void* cuda_stream) {
  return guarded("ec_partial_post", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(PartialAllreduce * p, partial_of(pa));
    EC_ASSIGN_OR_RETURN(DataType type, to_dtype(dtype));
    return p->post(gradient, count, type, CudaStream{cuda_stream});
  });
}

ec_status ec_partial_post(ec_partial* pa, const void* gradient, size_t count, ec_dtype dtype) {
  return ec_partial_post_on_stream(pa, gradient, count, dtype, nullptr);
}

ec_status ec_partial_poll(ec_partial* pa, void* result, size_t count, ec_round_info* info) {
  return guarded("ec_partial_poll", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(PartialAllreduce * p, partial_of(pa));
    EC_RETURN_IF_ERROR(check_result_buffer(*p, result, count));
    EC_ASSIGN_OR_RETURN(std::optional<RoundResult> r, p->poll());
    if (!r) return in_progress();
    hand_back(*r, result, info);
    return Status::Ok();
  });
}

ec_status ec_partial_wait(ec_partial* pa, void* result, size_t count, ec_round_info* info,
                          int64_t timeout_ms) {
  return guarded("ec_partial_wait", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(PartialAllreduce * p, partial_of(pa));
    EC_RETURN_IF_ERROR(check_result_buffer(*p, result, count));
    EC_ASSIGN_OR_RETURN(std::chrono::nanoseconds timeout, to_timeout(timeout_ms));
    EC_ASSIGN_OR_RETURN(RoundResult r, p->wait(timeout));
    hand_back(r, result, info);
    return Status::Ok();
  });
}

ec_status ec_partial_flush(ec_partial* pa, ec_round_fn fn, void* user_data, uint64_t* flush_round) {
  return guarded("ec_partial_flush", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(PartialAllreduce * p, partial_of(pa));
    EC_ASSIGN_OR_RETURN(uint64_t round, p->flush([&](RoundResult&& r) {
      if (fn == nullptr) return;
      const ec_round_info info = info_of(r);
      fn(r.data(), r.count(), &info, user_data);
    }));
    if (flush_round != nullptr) *flush_round = round;
    return Status::Ok();
  });
}

ec_status ec_partial_lateness(ec_partial* pa, int rank, ec_rank_lateness* out) {
  return guarded("ec_partial_lateness", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "null output pointer");
    EC_ASSIGN_OR_RETURN(PartialAllreduce * p, partial_of(pa));
    const std::vector<RankLateness> all = p->lateness();
    if (rank < 0 || static_cast<size_t>(rank) >= all.size()) {
      return make_status(StatusCode::kInvalidArgument, "rank %d is not in 0 .. %zu", rank,
                         all.size() - 1);
    }
    const RankLateness& l = all[static_cast<size_t>(rank)];
    *out = ec_rank_lateness{l.rounds, l.posts,       l.fresh,   l.late,
                            l.absent, l.late_rounds, l.max_age, l.late_seconds};
    return Status::Ok();
  });
}

ec_status ec_partial_destroy(ec_partial* pa) {
  return guarded("ec_partial_destroy", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(PartialAllreduce * p, partial_of(pa));
    p->destroy();
    return Status::Ok();
  });
}

void ec_partial_free(ec_partial* pa) {
  if (pa == nullptr || pa->magic != kPartialMagic) return;
  (void)guarded("ec_partial_free", [&]() -> Status {
    pa->magic = 0;
    delete pa;  // ~PartialAllreduce destroys
    return Status::Ok();
  });
}

}  // extern "C"
