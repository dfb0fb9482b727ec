// The data path: write(), notify(), poll(), the notification rings and the UCX callbacks of
// sends (one file, so that the calls of a write stay inlinable).
#include <cstring>
#include <string>

#include "runtime/deadline.h"
#include "runtime/gpu.h"
#include "transport/transport_log.h"
#include "transport/ucx/ucx_transport_impl.h"
#include "transport/write_bounds.h"

namespace eagercomm::ucx {

Status UcxTransport::check_peer(int peer, const char* what) const {
  if (peer >= 0 && peer < size()) return Status::Ok();
  return make_status(StatusCode::kInvalidArgument, "ucx: %s: peer rank %d out of range [0, %d)",
                     what, peer, size());
}

Status UcxTransport::check_sendable(int peer, const char* what) const {
  EC_RETURN_IF_ERROR(check_peer(peer, what));
  const Peer& p = peers_[peer];
  if (closed_) {
    return make_status(StatusCode::kAborted, "ucx: %s: this transport was closed", what);
  }
  if (!p.ep) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: %s: rank %d is not connected (connect() it first)", what, peer);
  }
  if (p.bye_received) {
    return make_status(StatusCode::kPeerFailed, "ucx: %s: rank %d has closed its transport", what,
                       peer);
  }
  if (p.failed) {
    return make_status(StatusCode::kPeerFailed, "ucx: %s: the connection to rank %d failed", what,
                       peer);
  }
  return Status::Ok();
}

UcxTransport::Op* UcxTransport::take_op(int peer) {
  if (free_ops_.empty()) return nullptr;
  Op* op = free_ops_.back();
  free_ops_.pop_back();
  op->peer = peer;
  ++peers_[peer].outstanding;
  return op;
}

void UcxTransport::release_part(Op* op) {
  if (--op->parts > 0) return;
  --peers_[op->peer].outstanding;
  free_ops_.push_back(op);
}

void UcxTransport::on_put_done(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  UcxTransport* self = op->owner;
  ucp_request_free(request);
  op->put_request = nullptr;
  if (status != UCS_OK) self->peer_failed(op->peer, status, "a put");
  // Failed or not, UCX is done with the source.
  self->done_.push(TransportCompletion::Kind::kWriteDone, op->peer, op->header.tag, op->cookie);
  self->release_part(op);
}

void UcxTransport::on_note_sent(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  UcxTransport* self = op->owner;
  ucp_request_free(request);
  op->am_request = nullptr;
  if (status != UCS_OK) self->peer_failed(op->peer, status, "a notification");
  self->release_part(op);
}

// Runs inside the driver's ucp_worker_progress(), in arrival order.
ucs_status_t UcxTransport::on_note(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param) {
  (void)data;
  (void)param;
  auto* self = static_cast<UcxTransport*>(arg);
  if (self == nullptr) return UCS_OK;  // after teardown
  NoteHeader h;
  if (header_length != sizeof(h) || length != 0) {
    EC_ERROR(kNet, "ucx: dropped a malformed notification (%zu header bytes, %zu data bytes)",
             header_length, length);
    return UCS_OK;
  }
  std::memcpy(&h, header, sizeof(h));
  if (h.sender < 0 || h.sender >= self->size()) {
    EC_ERROR(kNet, "ucx: dropped a notification from unknown rank %d", h.sender);
    return UCS_OK;
  }
  self->done_.push(TransportCompletion::Kind::kNotify, h.sender, h.tag, 0);
  return UCS_OK;
}

Status UcxTransport::send_control(int peer, Control kind) {
  Op* op = take_op(peer);
  if (op == nullptr) return Status(StatusCode::kBusy, {});
  op->header = NoteHeader{rank(), kind};
  op->cookie = 0;
  op->parts = 1;
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = &UcxTransport::on_note_sent;
  param.user_data = op;
  ucs_status_ptr_t r = ucp_am_send_nbx(peers_[peer].ep, kControlAmId, &op->header,
                                       sizeof(op->header), nullptr, 0, &param);
  Status result;
  if (UCS_PTR_IS_ERR(r)) {
    result = make_status(code_of(UCS_PTR_STATUS(r)), "ucx: control message to rank %d: %s", peer,
                         ucs_status_string(UCS_PTR_STATUS(r)));
  } else if (r != nullptr) {
    op->am_request = r;
    ++op->parts;
  }
  release_part(op);
  return result;
}

Status UcxTransport::send_note(Op* op, ucp_ep_h ep) {
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = &UcxTransport::on_note_sent;
  param.user_data = op;
  ++op->parts;
  ucs_status_ptr_t r =
      ucp_am_send_nbx(ep, kNotifyAmId, &op->header, sizeof(op->header), nullptr, 0, &param);
  if (r == nullptr) {
    release_part(op);
    return Status::Ok();
  }
  if (UCS_PTR_IS_ERR(r)) {
    const ucs_status_t s = UCS_PTR_STATUS(r);
    release_part(op);
    peer_failed(op->peer, s, "a notification");
    return make_status(code_of(s), "ucx: notification to rank %d failed: %s", op->peer,
                       ucs_status_string(s));
  }
  op->am_request = r;
  return Status::Ok();
}

Status UcxTransport::write(const MemoryRegion& local, size_t local_offset,
                           const RemoteRegion& remote, size_t remote_offset, size_t bytes,
                           uint32_t tag, uint64_t cookie) {
  const auto* src = exactly<UcxRegion>(local);
  if (src == nullptr || src->core() != core_.get()) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: write: the local region was not made by this ucx transport");
  }
  const auto* dst = exactly<UcxRemote>(remote);
  if (dst == nullptr || dst->core() != core_.get()) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: write: the remote region was not imported by this ucx transport");
  }
  EC_RETURN_IF_ERROR(check_write_bounds("ucx", local, local_offset, remote, remote_offset, bytes));
  const int peer = remote.peer();  // in range: import_region() checked it
  Peer& p = peers_[peer];
  if (!p.hello_acked) EC_RETURN_IF_ERROR(ready_to_send(peer));
  if (closed_ || !p.ep || p.bye_received || p.failed) return check_sendable(peer, "write");
  if (p.ring.attached()) {
    // The peer's memory is mapped here: stores, then the ring. Memory that is not mapped is
    // put and flushed first, since a ring push is not ordered after a put.
    EC_RETURN_IF_ERROR(ring_room(peer));
    const auto* from = static_cast<const uint8_t*>(local.data()) + local_offset;
    if (bytes > 0 && dst->mapped() == nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
      param.memh = src->memh();
      ucs_status_ptr_t r =
          ucp_put_nbx(p.ep, from, bytes, dst->base() + remote_offset, dst->rkey(), &param);
      if (UCS_PTR_IS_ERR(r)) {
        const ucs_status_t st = UCS_PTR_STATUS(r);
        if (st == UCS_ERR_NO_RESOURCE) return Status(StatusCode::kBusy, {});
        peer_failed(peer, st, "a put");
        return make_status(code_of(st), "ucx: put of %zu bytes to rank %d failed: %s", bytes, peer,
                           ucs_status_string(st));
      }
      if (r != nullptr) ucp_request_free(r);  // flush_peer() waits for it
      EC_RETURN_IF_ERROR(flush_peer(peer));
    }
    if (bytes > 0 && dst->mapped() != nullptr && local.kind() == MemoryKind::kCuda) {
      // A GPU source cannot be read by host stores: cudaMemcpy into the mapped memory instead.
      EC_RETURN_IF_ERROR(
          gpu::copy(static_cast<uint8_t*>(dst->mapped()) + remote_offset, from, bytes));
      ring_push(p, tag);
      done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
      return Status::Ok();
    }
    // Nothing can fail from here on. The stores first: the time from a poll() that saw a
    // notification to the store of the answer is the latency a ping-pong adds per hop.
    if (bytes > 0 && dst->mapped() != nullptr) {
      copy_small(static_cast<uint8_t*>(dst->mapped()) + remote_offset, from, bytes);
    }
    ring_push(p, tag);
    done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
    return Status::Ok();
  }
  Op* op = take_op(peer);
  if (op == nullptr) return Status(StatusCode::kBusy, {});
  op->header = NoteHeader{rank(), tag};
  op->cookie = cookie;
  op->parts = 1;  // held by this call until the notification is issued
  ucp_ep_h ep = peers_[peer].ep;
  if (bytes > 0) {
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = &UcxTransport::on_put_done;
    param.user_data = op;
    param.memh = src->memh();
    ucs_status_ptr_t r = ucp_put_nbx(ep, static_cast<const uint8_t*>(local.data()) + local_offset,
                                     bytes, dst->base() + remote_offset, dst->rkey(), &param);
    if (UCS_PTR_IS_ERR(r)) {
      const ucs_status_t s = UCS_PTR_STATUS(r);
      release_part(op);
      if (s == UCS_ERR_NO_RESOURCE) return Status(StatusCode::kBusy, {});
      peer_failed(peer, s, "a put");
      return make_status(code_of(s), "ucx: put of %zu bytes to rank %d failed: %s", bytes, peer,
                         ucs_status_string(s));
    }
    if (r == nullptr) {
      done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
    } else {
      op->put_request = r;
      ++op->parts;
    }
  } else {
    done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
  }
  // The put must be complete at the target before the notification is processed there.
  const ucs_status_t f = ucp_worker_fence(core_->worker);
  if (f != UCS_OK) {
    release_part(op);
    return ucx_failure(f, "fence after a put to rank " + std::to_string(peer));
  }
  Status s = send_note(op, ep);
  release_part(op);
  return s;
}

Status UcxTransport::notify(int peer, uint32_t tag) {
  EC_RETURN_IF_ERROR(check_peer(peer, "notify"));
  if (!peers_[peer].hello_acked) EC_RETURN_IF_ERROR(ready_to_send(peer));
  EC_RETURN_IF_ERROR(check_sendable(peer, "notify"));
  if (peers_[peer].ring.attached()) return ring_notify(peer, tag);
  Op* op = take_op(peer);
  if (op == nullptr) return Status(StatusCode::kBusy, {});
  op->header = NoteHeader{rank(), tag};
  op->cookie = 0;
  op->parts = 1;
  // Publishes stores made through mapped_address() before the notification leaves.
  fence(std::memory_order_release);
  Status s = send_note(op, peers_[peer].ep);
  release_part(op);
  return s;
}

Status UcxTransport::ring_room(int peer) {
  switch (peers_[peer].ring.room()) {
    case notify_ring::Room::kOk:
      return Status::Ok();
    case notify_ring::Room::kFull:
      return Status(StatusCode::kBusy, {});
    case notify_ring::Room::kCorrupt:
      break;
  }
  peer_failed(peer, UCS_ERR_IO_ERROR, "its notification ring (impossible head index)");
  return make_status(StatusCode::kProtocolError,
                     "ucx: rank %d corrupted its notification ring (impossible head index)", peer);
}

Status UcxTransport::ring_notify(int peer, uint32_t tag) {
  EC_RETURN_IF_ERROR(ring_room(peer));
  ring_push(peers_[peer], tag);
  return Status::Ok();
}

void UcxTransport::ring_push(Peer& p, uint32_t tag) {
  // A release store: data stored through mappings before it is visible with the tag.
  p.ring.push(tag);
  // The sleeper rule with wait() (notify_ring/sleepers.h): the receiver announced itself in
  // `sleepers` before its last look at the rings; a push it may have missed wakes it.
  if (p.sleepers->any()) {
    if (send_control(p.rank, kWake).code() == StatusCode::kBusy) {
      p.wake_due = true;
      any_wake_due_ = true;
    }
  }
}

Status UcxTransport::flush_peer(int peer) {
  ucp_request_param_t param{};
  ucs_status_ptr_t r = ucp_ep_flush_nbx(peers_[peer].ep, &param);
  if (r == nullptr) return Status::Ok();
  ucs_status_t st = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_INPROGRESS;
  while (st == UCS_INPROGRESS) {
    ucp_worker_progress(core_->worker);
    st = ucp_request_check_status(r);
  }
  if (!UCS_PTR_IS_ERR(r)) ucp_request_free(r);
  if (st == UCS_OK) return Status::Ok();
  peer_failed(peer, st, "a flush");
  return make_status(code_of(st), "ucx: flushing puts to rank %d failed: %s", peer,
                     ucs_status_string(st));
}

size_t UcxTransport::drain_rings(std::span<TransportCompletion> out) {
  size_t n = 0;
  int failed = -1;
  for (const int sender : ring_senders_) {
    if (n == out.size()) break;
    const notify_ring::Drained d = notify_ring::drain(consumers_[sender], sender, out.subspan(n));
    n += d.count;
    if (d.corrupt) failed = sender;
  }
  if (failed >= 0) {  // at most one per call; a later call finds the next
    std::erase(ring_senders_, failed);
    EC_ERROR(kNet,
             "ucx: rank %d's notification ring holds impossible entries; ignoring it from now on",
             failed);
    if (!peers_[failed].failed) {
      peers_[failed].failed_why =
          "ucx: rank " + std::to_string(failed) + "'s notification ring holds impossible entries";
    }
    if (!peers_[failed].failed && n < out.size()) {
      peers_[failed].failed = true;
      TransportCompletion& c = out[n++];
      c.kind = TransportCompletion::Kind::kPeerError;
      c.peer = failed;
      c.tag = 0;
      c.cookie = 0;
    } else if (!peers_[failed].failed) {
      peers_[failed].failed = true;
      done_.push(TransportCompletion::Kind::kPeerError, failed, 0, 0);
    }
  }
  return n;
}

bool UcxTransport::rings_maybe_nonempty() const {
  for (int sender = 0; sender < size(); ++sender) {
    if (consumers_[sender].maybe_nonempty()) return true;
  }
  return false;
}

void UcxTransport::probe_peers() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_probe_) return;
  next_probe_ = deadline_after(kLivenessInterval, now);
  for (Peer& p : peers_) {
    if (!p.live.valid() || p.failed || p.bye_received || !p.ep) continue;
    if (p.live.check() != LivenessWatch::State::kDead) continue;
    p.live.reap();  // nothing left in /dev/shm, launcher or not
    p.failed = true;
    p.failed_why = "ucx: rank " + std::to_string(p.rank) + "'s process is gone (killed or crashed)";
    EC_ERROR(kNet, "ucx: rank %d's process is gone (killed or crashed)", p.rank);
    done_.push(TransportCompletion::Kind::kPeerError, p.rank, 0, 0);
  }
}

size_t UcxTransport::poll(std::span<TransportCompletion> out) {
  if (closed_) return 0;
  // Rings first; the worker's progress (the expensive part of a poll) waits for a later call, at
  // most kRingPollsPerProgress of them.
  if (++ring_polls_ < kRingPollsPerProgress && !progress_due_.load(std::memory_order_relaxed)) {
    fence(std::memory_order_acquire);
    const size_t n = done_.drain(out);
    return n + drain_rings(out.subspan(n));
  }
  ring_polls_ = 0;
  progress_due_.store(false, std::memory_order_relaxed);
  events_reported_.store(false, std::memory_order_relaxed);
  int progressed = 0;
  for (int pass = 0; pass < kProgressPasses; ++pass) {
    const unsigned events = ucp_worker_progress(core_->worker);
    progressed += events;
    if (events == 0) break;
    if (done_.size() >= out.size()) break;
  }
  if (progressed == 0 && done_.size() == 0 && watching_.load(std::memory_order_relaxed)) {
    // A load and a store, not a read-modify-write (see the shm backend).
    const unsigned idle = idle_polls_.load(std::memory_order_relaxed) + 1;
    idle_polls_.store(idle, std::memory_order_relaxed);
    if (idle >= kIdlePollsPerClockRead) {
      idle_polls_.store(0, std::memory_order_relaxed);
      probe_peers();
    }
  }
  send_due_controls();
  // Pairs with the sender's release fence in notify(): data stored through mapped memory
  // before a notification is visible once the notification is.
  fence(std::memory_order_acquire);
  const size_t n = done_.drain(out);
  return n + drain_rings(out.subspan(n));
}

void UcxTransport::send_due_controls() {
  if (any_wake_due_) {
    any_wake_due_ = false;
    for (Peer& p : peers_) {
      if (p.hello_due) {
        if (send_control(p.rank, kHello).code() == StatusCode::kBusy) {
          any_wake_due_ = true;
        } else {
          p.hello_due = false;
        }
      }
      if (!p.wake_due) continue;
      if (send_control(p.rank, kWake).code() == StatusCode::kBusy) {
        any_wake_due_ = true;
      } else {
        p.wake_due = false;
      }
    }
  }
  // Answer hellos and goodbyes here, not in the AM handler (no sends from inside progress). A
  // peer that connected to this rank is answered over an endpoint made for it (the pair's
  // connection, which this rank's own sends to it use too).
  answer_due(hello_acks_due_, kHelloAck);
  answer_due(acks_due_, kByeAck);
}

void UcxTransport::answer_due(std::vector<int>& due, Control answer) {
  while (!due.empty()) {
    const int peer = due.back();
    const Peer& p = peers_[peer];
    if (!p.ep && !p.failed) (void)open_ep(peer);
    if (p.ep && !p.ep_failed && send_control(peer, answer).code() == StatusCode::kBusy) break;
    due.pop_back();
  }
}

}  // namespace eagercomm::ucx
