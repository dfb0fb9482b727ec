#include "collectives/engine/op.h"

#include <cstring>

namespace eagercomm::detail {

const char* coll_kind_name(CollKind kind) {
  switch (kind) {
    case CollKind::kAllreduce:
      return "allreduce";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kAllgather:
      return "allgather";
    case CollKind::kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

std::string describe(const OpSignature& sig) {
  if (sig.root == kPartialCreateTag) return "partial allreduce creation";
  if (sig.root == kPartialFlushTag) return "partial allreduce flush()";
  const auto kind = static_cast<CollKind>(sig.coll);
  const char* name = coll_kind_name(kind);
  const std::string type =
      is_valid_dtype(sig.dtype) ? std::string(dtype_name(static_cast<DataType>(sig.dtype))) : "?";
  const std::string op = is_valid_reduce_op(sig.redop)
                             ? std::string(reduce_op_name(static_cast<ReduceOp>(sig.redop)))
                             : "?";
  char buf[160];
  switch (kind) {
    case CollKind::kAllreduce:
      snprintf(buf, sizeof(buf), "%s(count=%llu, %s, %s)", name,
               static_cast<unsigned long long>(sig.count), type.c_str(), op.c_str());
      break;
    case CollKind::kBroadcast:
      snprintf(buf, sizeof(buf), "%s(count=%llu, %s, root=%d)", name,
               static_cast<unsigned long long>(sig.count), type.c_str(), sig.root);
      break;
    case CollKind::kAllgather:
      snprintf(buf, sizeof(buf), "%s(count=%llu, %s)", name,
               static_cast<unsigned long long>(sig.count), type.c_str());
      break;
    default:
      snprintf(buf, sizeof(buf), "%s", name);
  }
  return buf;
}

Status signature_mismatch(uint64_t seq, int peer, const OpSignature& theirs, int rank,
                          const OpSignature& mine) {
  OpSignature theirs_args = theirs, mine_args = mine;
  theirs_args.reserved = mine_args.reserved = 0;
  if (theirs_args == mine_args) {
    return make_status(StatusCode::kMismatch,
                       "%s #%llu: rank %d and rank %d chose different algorithms; the EAGERCOMM_*"
                       "_ALGO and *_BYTES settings must be the same on every rank",
                       describe(mine).c_str(), static_cast<unsigned long long>(seq), peer, rank);
  }
  return make_status(StatusCode::kMismatch,
                     "collective #%llu: rank %d called %s but rank %d called %s",
                     static_cast<unsigned long long>(seq), peer, describe(theirs).c_str(), rank,
                     describe(mine).c_str());
}

MsgHeader read_header(const InMessage& m) {
  MsgHeader h;
  std::memcpy(&h, m.user_header, sizeof(h));
  return h;
}

void Op::rearm(OpSignature sig) {
  sig_ = sig;
  key_ = 0;
  precheck_error = Status::Ok();
  waiting_since = {};
  probe_next = 0;
  keep_alive.reset();
  status_ = Status::Ok();
  done_.store(false, std::memory_order_relaxed);
}

Status Op::send(OpContext& ctx, const SendSlot& slot, MsgKind kind, uint32_t step, uint64_t a,
                uint64_t b, size_t payload_bytes) {
  MsgHeader h;
  h.key = key_;
  h.sig = sig_;
  h.kind = static_cast<uint32_t>(kind);
  h.step = step;
  h.a = a;
  h.b = b;
  std::memcpy(slot.user_header, &h, sizeof(h));
  return ctx.mailbox->send(slot, payload_bytes);
}

}  // namespace eagercomm::detail
