// What PartialAllreduce::create() settles with the other ranks before the object exists.
#include "collectives/partial/partial_create.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/collective_log.h"
#include "collectives/engine/comm_core.h"
#include "collectives/partial/partial_meta.h"

namespace eagercomm::detail {

namespace {

constexpr uint32_t kLastKind = static_cast<uint32_t>(PartialKind::kDeadline);

// What every rank must agree on, exchanged at creation.
struct Descriptor {
  uint64_t count;
  uint64_t seed;
  uint32_t dtype;
  uint32_t kind;
  int32_t quorum;
  uint32_t late;
  uint32_t sync_every;
  uint32_t result_depth;
  uint32_t stream;
  uint32_t solo_speedup_permille;
  uint64_t deadline_us;  // kDeadline's T (0: auto)
  uint32_t on_failure;
  uint32_t reserved;
};
static_assert(sizeof(Descriptor) % 8 == 0);

Descriptor describe_args(size_t count, DataType type, PartialMode mode, const PartialOptions& o,
                         uint32_t stream) {
  Descriptor d{};
  d.count = count;
  d.seed = o.seed;
  d.dtype = static_cast<uint32_t>(type);
  d.kind = static_cast<uint32_t>(mode.kind);
  d.quorum = mode.quorum;
  // Only a deadline mode has one; a negative one is refused by validate().
  d.deadline_us = mode.kind != PartialKind::kDeadline ? 0
                  : mode.deadline.count() < 0         ? UINT64_MAX
                                              : static_cast<uint64_t>(mode.deadline.count());
  d.late = static_cast<uint32_t>(o.late);
  d.sync_every = o.sync_every;
  d.on_failure = static_cast<uint32_t>(o.on_failure);
  d.result_depth = o.result_depth;
  d.stream = stream;
  d.solo_speedup_permille = o.solo_speedup >= 1 && o.solo_speedup <= PartialOptions::kMaxSoloSpeedup
                                ? static_cast<uint32_t>(std::lround(o.solo_speedup * 1000))
                                : UINT32_MAX;
  return d;
}

// The first argument in which `theirs` differs from `mine`, as "count=10 ... count=11".
std::string first_difference(const Descriptor& a, const Descriptor& b, int rank_a, int rank_b) {
  char buf[256];
  auto say = [&](const char* what, unsigned long long x, unsigned long long y) {
    snprintf(buf, sizeof(buf),
             "partial allreduce: rank %d created it with %s=%llu but rank %d with %s=%llu", rank_a,
             what, x, rank_b, what, y);
    return std::string(buf);
  };
  // Enumerations by name ("dtype=f32", "late=drop"), the rest as numbers.
  auto say_names = [&](const char* what, const std::string& x, const std::string& y) {
    snprintf(buf, sizeof(buf),
             "partial allreduce: rank %d created it with %s=%s but rank %d with %s=%s", rank_a,
             what, x.c_str(), rank_b, what, y.c_str());
    return std::string(buf);
  };
  auto type_name = [](uint32_t t) {
    return is_valid_dtype(t) ? std::string(dtype_name(static_cast<DataType>(t)))
                             : "type " + std::to_string(t);
  };
  auto late_name = [](uint32_t l) {
    return l == 0 ? std::string("carry") : l == 1 ? std::string("drop") : std::to_string(l);
  };
  if (a.count != b.count) return say("count", a.count, b.count);
  if (a.dtype != b.dtype) return say_names("dtype", type_name(a.dtype), type_name(b.dtype));
  if (a.kind != b.kind || a.quorum != b.quorum || a.deadline_us != b.deadline_us) {
    auto name = [](const Descriptor& d) {
      return d.kind <= kLastKind ? PartialMode{static_cast<PartialKind>(d.kind), d.quorum,
                                               std::chrono::microseconds(d.deadline_us)}
                                       .name()
                                 : std::string("mode ") + std::to_string(d.kind);
    };
    snprintf(buf, sizeof(buf), "partial allreduce: rank %d created it in mode %s but rank %d in %s",
             rank_a, name(a).c_str(), rank_b, name(b).c_str());
    return buf;
  }
  if (a.late != b.late) return say_names("late", late_name(a.late), late_name(b.late));
  if (a.sync_every != b.sync_every) return say("sync_every", a.sync_every, b.sync_every);
  if (a.seed != b.seed) return say("seed", a.seed, b.seed);
  if (a.result_depth != b.result_depth) return say("result_depth", a.result_depth, b.result_depth);
  if (a.solo_speedup_permille != b.solo_speedup_permille) {
    return say("solo_speedup (per mille)", a.solo_speedup_permille, b.solo_speedup_permille);
  }
  if (a.on_failure != b.on_failure) {
    auto failure_name = [](uint32_t f) {
      return f == 0 ? std::string("fail") : f == 1 ? std::string("continue") : std::to_string(f);
    };
    return say_names("on_failure", failure_name(a.on_failure), failure_name(b.on_failure));
  }
  if (a.stream != b.stream) {
    return say("object number (ranks created partial allreduces in a different order)", a.stream,
               b.stream);
  }
  return {};
}

Status validate(const Descriptor& d, int size) {
  if (!is_valid_dtype(d.dtype)) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: data type %u is not a "
                       "DataType",
                       d.dtype);
  }
  if (d.kind > kLastKind) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: mode %u is not a "
                       "PartialKind",
                       d.kind);
  }
  if (d.kind == static_cast<uint32_t>(PartialKind::kQuorum) && (d.quorum < 1 || d.quorum > size)) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: quorum(%d) with %d ranks (accepted: 1 .. %d)", d.quorum,
                       size, size);
  }
  if (d.kind == static_cast<uint32_t>(PartialKind::kDeadline) &&
      d.deadline_us >
          static_cast<uint64_t>(std::chrono::microseconds(PartialMode::kMaxDeadline).count())) {
    if (d.deadline_us == UINT64_MAX) {
      return make_status(StatusCode::kInvalidArgument,
                         "partial allreduce: a negative deadline (accepted: 1 us .. 1 h, or 0: "
                         "auto)");
    }
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: deadline of %llu us (accepted: 1 us .. 1 h, or 0: auto)",
                       static_cast<unsigned long long>(d.deadline_us));
  }
  if (d.solo_speedup_permille == UINT32_MAX) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: solo_speedup is not in [1, %g] (a speedup per epoch)",
                       PartialOptions::kMaxSoloSpeedup);
  }
  if (d.late > 1) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: late policy %u is not "
                       "carry (0) or drop (1)",
                       d.late);
  }
  if (d.on_failure > 1) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: on_failure %u is not fail (0) or continue (1)",
                       d.on_failure);
  }
  if (d.result_depth < 1 || d.result_depth > 1024) {
    return make_status(StatusCode::kInvalidArgument,
                       "partial allreduce: result_depth %u (accepted: 1 .. 1024)", d.result_depth);
  }
  if (d.count > (size_t{1} << 40)) {
    return make_status(StatusCode::kInvalidArgument, "partial allreduce: count %llu is too large",
                       static_cast<unsigned long long>(d.count));
  }
  return Status::Ok();
}

// One allgather of `words` int64 per rank on the collective stream, named as the creation in
// errors (so that a rank that made another collective meanwhile gets a mismatch, not a join).
Status allgather_words(CommCore& core, const void* mine, size_t words, void* all) {
  OpSignature sig;
  sig.coll = static_cast<uint8_t>(CollKind::kAllgather);
  sig.dtype = static_cast<uint8_t>(DataType::kInt64);
  sig.count = words;
  sig.reserved = static_cast<uint8_t>(Algo::kRing);
  sig.root = kPartialCreateTag;
  return core.run(make_ring_allgather(sig, mine, all));
}

// An allreduce of `words` int64 on the collective stream by recursive doubling (a few words: one
// slot per step), named as the creation in errors like allgather_words().
Status allreduce_words(CommCore& core, const void* in, void* out, size_t words, ReduceOp op) {
  OpSignature sig;
  sig.coll = static_cast<uint8_t>(CollKind::kAllreduce);
  sig.dtype = static_cast<uint8_t>(DataType::kInt64);
  sig.redop = static_cast<uint8_t>(op);
  sig.count = words;
  sig.reserved = static_cast<uint8_t>(core.size() == 1 ? Algo::kLocal : Algo::kRecursiveDoubling);
  sig.root = kPartialCreateTag;
  return core.run(make_allreduce(sig, in, out));
}

// `root`'s descriptor on every rank: a sum to which only `root` contributes (exact, whatever
// the bits).
Result<Descriptor> from_rank(CommCore& core, const Descriptor& mine, int root) {
  Descriptor in{};
  if (core.rank() == root) in = mine;
  Descriptor out{};
  EC_RETURN_IF_ERROR(allreduce_words(core, &in, &out, sizeof(Descriptor) / 8, ReduceOp::kSum));
  return out;
}

// Box keys travel in fixed records: a length word, then the key.
constexpr size_t kBoxRecordWords = 32;
constexpr size_t kMaxBoxKey = (kBoxRecordWords - 1) * 8;

}  // namespace

Status agree_on_partial_arguments(CommCore& core, size_t count, DataType type, PartialMode mode,
                                  const PartialOptions& options, uint32_t stream) {
  // Everybody compares with rank 0 and agrees on the lowest rank that differs: two allreduces of
  // a few words (O(log P) messages per rank, nothing of size P), where an allgather of every
  // rank's arguments cost P - 1 steps and P records per rank (gigabytes at P = 4096 in the
  // simulation). Only when a rank differs, a third sends its arguments to everybody, so that
  // every rank names the same two ranks and the same argument.
  const int P = core.size();
  const int rank = core.rank();
  const Descriptor mine = describe_args(count, type, mode, options, stream);
  EC_ASSIGN_OR_RETURN(const Descriptor rank0, from_rank(core, mine, 0));
  const int64_t differs = first_difference(rank0, mine, 0, rank).empty() ? P : rank;
  int64_t first = P;
  EC_RETURN_IF_ERROR(allreduce_words(core, &differs, &first, 1, ReduceOp::kMin));
  if (first < P) {
    EC_ASSIGN_OR_RETURN(const Descriptor theirs, from_rank(core, mine, static_cast<int>(first)));
    return Status(StatusCode::kMismatch,
                  first_difference(rank0, theirs, 0, static_cast<int>(first)));
  }
  return validate(rank0, P);
}

Result<std::unique_ptr<SmallBoxes>> make_partial_round_boxes(CommCore& core, size_t data_bytes,
                                                             size_t bytes) {
  const int P = core.size();
  const int rank = core.rank();
  std::unique_ptr<SmallBoxes> boxes;
  // Whether boxes can exist at all is the same on every rank (world size, transport, agreed
  // size and settings): no need to agree on it, and no allgather of P records where they cannot.
  if (P < 2 || !core.round_boxes_possible(data_bytes)) return boxes;
  Result<std::unique_ptr<SmallBoxes>> made = core.make_round_boxes(data_bytes, bytes);
  if (made.ok()) {
    boxes = std::move(made).value();
  } else {
    EC_WARN(kPartial, "partial allreduce: no boxes for its rounds (%s); they run as messages",
            made.status().to_string().c_str());
  }
  std::vector<uint64_t> mine(kBoxRecordWords, 0);
  if (boxes && boxes->key().size() <= kMaxBoxKey) {
    mine[0] = boxes->key().size();
    std::memcpy(&mine[1], boxes->key().data(), boxes->key().size());
  }
  std::vector<uint64_t> all(static_cast<size_t>(P) * kBoxRecordWords);
  EC_RETURN_IF_ERROR(allgather_words(core, mine.data(), kBoxRecordWords, all.data()));
  for (int r = 0; r < P; ++r) {
    const uint64_t length = all[static_cast<size_t>(r) * kBoxRecordWords];
    if (length == 0 || length > kMaxBoxKey) return std::unique_ptr<SmallBoxes>();
  }
  uint64_t mapped = 1;
  for (int peer = 0; peer < P && mapped; ++peer) {
    if (peer == rank) continue;
    const uint64_t* record = &all[static_cast<size_t>(peer) * kBoxRecordWords];
    std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(record + 1), record[0]);
    if (Status st = core.connect_round_boxes(*boxes, peer, key); !st.ok()) {
      EC_WARN(kPartial, "partial allreduce: rank %d's boxes: %s; rounds run as messages", peer,
              st.to_string().c_str());
      mapped = 0;
    }
  }
  std::vector<uint64_t> everyone(static_cast<size_t>(P));
  EC_RETURN_IF_ERROR(allgather_words(core, &mapped, 1, everyone.data()));
  for (int r = 0; r < P; ++r) {
    if (everyone[r] == 0) return std::unique_ptr<SmallBoxes>();
  }
  return boxes;
}

}  // namespace eagercomm::detail
