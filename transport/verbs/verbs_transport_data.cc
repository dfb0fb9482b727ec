// The data path of the verbs transport (verbs_transport.h): write() and notify() as
// RDMA_WRITE_WITH_IMM within the peer's receive credits, the credit updates back, poll() over
// the completion queue, and the idle path (wait(), wake()).
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/gpu.h"
#include "transport/transport_log.h"
#include "transport/verbs/verbs_transport_impl.h"
#include "transport/write_bounds.h"

namespace eagercomm::verbs {

Status VerbsTransport::check_sendable(int peer, const char* what) {
  if (closed_) return make_status(StatusCode::kAborted, "verbs: %s: transport closed", what);
  if (peer < 0 || peer >= size() || peer == rank()) {
    return make_status(StatusCode::kInvalidArgument, "verbs: %s: rank %d is not a peer", what,
                       peer);
  }
  const Peer& p = peers_[peer];
  if (!p.known) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: %s: rank %d is not connected (connect() it first)", what, peer);
  }
  if (p.failed) {
    return make_status(StatusCode::kPeerFailed, "verbs: %s: the connection to rank %d failed", what,
                       peer);
  }
  if (p.left) {
    return make_status(StatusCode::kPeerFailed,
                       "verbs: %s: rank %d has closed its transport (it disconnected)", what, peer);
  }
  // The cm path connects in the background (poll() drives it): try again later.
  if (!p.connected) return connect_on_demand(peer);
  return Status::Ok();
}

Status VerbsTransport::connect_on_demand(int peer) {
  Peer& p = peers_[peer];
  if (p.conn->path() == ConnectPath::kCm && p.conn->state() == ConnState::kAwaitingRequest) {
    if (const Status s = create_queue_pair(peer); !s.ok()) {
      fail_peer(peer, std::string(s.message()));
      return make_status(StatusCode::kPeerFailed, "verbs: connecting to rank %d: %s", peer,
                         std::string(s.message()).c_str());
    }
    drive(peer, ConnEvent::kFirstSend);
    if (p.failed) {
      return make_status(StatusCode::kPeerFailed, "verbs: connecting to rank %d: %s", peer,
                         p.failed_why.c_str());
    }
  }
  return Status(StatusCode::kBusy, {});
}

uint64_t VerbsTransport::credit_word(int peer) const {
  const auto* words = static_cast<const uint64_t*>(credit_in_->data());
  // Written by the NIC on the peer's behalf; atomic so the compiler reads it every time.
  return __atomic_load_n(&words[peer], __ATOMIC_ACQUIRE);
}

Status VerbsTransport::post_write(int peer, uint64_t local_addr, uint32_t lkey,
                                  uint64_t remote_addr, uint32_t rkey, size_t bytes, uint32_t tag,
                                  uint64_t cookie, Post what) {
  Peer& p = peers_[peer];
  // The word is 0 until the peer's first update.
  if (const uint64_t word = p.credits.can_send() ? 0 : credit_word(peer);
      word != 0 && !p.credits.update(word)) {
    fail_peer(peer, "its credit count is impossible (corrupt or hostile peer)");
    return make_status(StatusCode::kProtocolError, "verbs: rank %d sent an impossible credit count",
                       peer);
  }
  if (!p.credits.can_send() || p.send_queue.full()) return Status(StatusCode::kBusy, {});
  const bool user_write = what != Post::kNotify;
  const Signal signal = p.send_queue.next_signal(Signaling::kAlways);
  uint64_t wr_id = control_wr_id(peer, signal.retires);
  uint32_t slot = 0;
  if (user_write) {
    slot = writes_.acquire({peer, tag, cookie, signal.retires});
    wr_id = slot;
  }
  ibv_sge sge{local_addr, static_cast<uint32_t>(bytes), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = bytes > 0 ? &sge : nullptr;
  wr.num_sge = bytes > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool inlined = bytes > 0 && bytes <= p.inline_max && what == Post::kHostWrite;
  wr.send_flags = (signal.signaled ? IBV_SEND_SIGNALED : 0) | (inlined ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(tag);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(p.qp, &wr, &bad); e != 0) {
    if (user_write) writes_.release(slot);
    if (e == ENOMEM) return Status(StatusCode::kBusy, {});
    fail_peer(peer, std::string("ibv_post_send: ") + std::strerror(e));
    return make_status(StatusCode::kPeerFailed, "verbs: posting a write to rank %d: %s", peer,
                       std::strerror(e));
  }
  p.credits.on_sent();
  p.send_queue.on_posted(signal);
  return Status::Ok();
}

Status VerbsTransport::write(const MemoryRegion& local, size_t local_offset,
                             const RemoteRegion& remote, size_t remote_offset, size_t bytes,
                             uint32_t tag, uint64_t cookie) {
  const auto* src = exactly<VerbsRegion>(local);
  const auto* dst = exactly<VerbsRemote>(remote);
  if (src == nullptr || src->core() != core_.get() || dst == nullptr ||
      dst->core() != core_.get()) {
    return Status(StatusCode::kInvalidArgument,
                  "verbs: write: a region was not made or imported by this verbs transport");
  }
  EC_RETURN_IF_ERROR(
      check_write_bounds("verbs", local, local_offset, remote, remote_offset, bytes, UINT32_MAX));
  if (bytes > max_message_) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: write of %zu bytes exceeds the port's max message size (%u bytes, "
                       "max_msg_sz of %s port %u): split it",
                       bytes, max_message_, endpoint_.device.c_str(), endpoint_.port);
  }
  EC_RETURN_IF_ERROR(check_sendable(remote.peer(), "write"));
  if (src->staged() && bytes > 0) {
    // No GPUDirect here: the bytes go out from the pinned copy, brought up to date first
    // (synchronously: the source is reusable, as kWriteDone will say, once the NIC read it).
    EC_RETURN_IF_ERROR(gpu::copy(reinterpret_cast<void*>(src->nic_address() + local_offset),
                                 static_cast<const uint8_t*>(local.data()) + local_offset, bytes));
  }
  // A staged region's NIC copy is host memory; GPU memory registered for GPUDirect is not.
  const Post what =
      local.kind() == MemoryKind::kHost || src->staged() ? Post::kHostWrite : Post::kDeviceWrite;
  return post_write(remote.peer(), src->nic_address() + local_offset, src->lkey(),
                    dst->addr() + remote_offset, dst->rkey(), bytes, tag, cookie, what);
}

Status VerbsTransport::notify(int peer, uint32_t tag) {
  EC_RETURN_IF_ERROR(check_sendable(peer, "notify"));
  const Peer& p = peers_[peer];
  // Zero bytes: the address and key are not used, but must be some valid pair.
  return post_write(peer, 0, 0, p.credit_addr, p.credit_rkey, 0, tag, 0, Post::kNotify);
}

Status VerbsTransport::post_receive(int peer) {
  ibv_recv_wr wr{};
  wr.wr_id = receive_wr_id(peer);
  wr.num_sge = 0;  // RDMA_WRITE_WITH_IMM places no data in the receive
  ibv_recv_wr* bad = nullptr;
  if (const int e = ibv_post_recv(peers_[peer].qp, &wr, &bad); e != 0) {
    return make_status(StatusCode::kInternal, "verbs: posting a receive for rank %d: %s", peer,
                       std::strerror(e));
  }
  return Status::Ok();
}

void VerbsTransport::post_credit(int peer) {
  Peer& p = peers_[peer];
  if (p.send_queue.full()) {
    p.credit_due = true;
    return;
  }
  // The count goes out from registered memory (inline when the device allows). A newer count
  // may overwrite a slot whose write is still in flight: counts only grow and each one was
  // true when written, so the peer may read either.
  auto* words = static_cast<uint64_t*>(credit_out_->data());
  words[peer] = p.returns.posted();
  ibv_sge sge{reinterpret_cast<uintptr_t>(&words[peer]), sizeof(uint64_t),
              static_cast<const VerbsRegion&>(*credit_out_).lkey()};
  const Signal signal = p.send_queue.next_signal(Signaling::kBatched);
  ibv_send_wr wr{};
  wr.wr_id = control_wr_id(peer, signal.retires);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;  // no immediate: consumes no receive at the peer
  wr.send_flags = (signal.signaled ? IBV_SEND_SIGNALED : 0) |
                  (p.inline_max >= sizeof(uint64_t) ? IBV_SEND_INLINE : 0);
  wr.wr.rdma.remote_addr = p.credit_addr + static_cast<uint64_t>(rank()) * 8;
  wr.wr.rdma.rkey = p.credit_rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(p.qp, &wr, &bad); e != 0) {
    p.credit_due = true;
    return;
  }
  p.returns.publish();
  p.credit_due = false;
  p.send_queue.on_posted(signal);
}

size_t VerbsTransport::poll(std::span<TransportCompletion> out) {
  if (closed_) return 0;
  progress_cm();
  // Async events (defect 3): a QP, CQ or port can fail with no completion of its own to say so.
  // Read when wait() saw the fd readable (an idle rank waits), else every kAsyncEvery polls of
  // a busy one: a read is a syscall, and a clock read per poll would tax the progress loop.
  if ((async_pending_.load(std::memory_order_relaxed) &&
       async_pending_.exchange(false, std::memory_order_acq_rel)) ||
      ++polls_since_async_ >= kAsyncEvery) {
    polls_since_async_ = 0;
    read_async_events();
  }
  // Peer errors found earlier first.
  size_t n = errors_.drain(out);
  ibv_wc wc[32];
  bool drained = false;  // the CQ had no more: completions of a disconnected peer are all out
  while (n < out.size()) {
    const int want = static_cast<int>(std::min<size_t>(32, out.size() - n));
    const int got = ibv_poll_cq(cq_, want, wc);
    if (got < 0) {
      // The CQ is in error (an overrun): completions were lost, so no peer's state is known.
      fail_all("ibv_poll_cq failed: the completion queue is in error (overrun?)");
      break;
    }
    drained = got < want;
    if (got == 0) break;
    for (int i = 0; i < got; ++i) {
      const ibv_wc& w = wc[i];
      const auto qp = qp_to_peer_.find(w.qp_num);
      if (qp == qp_to_peer_.end()) continue;  // a QP of ours always maps; defensive
      const int peer = qp->second;
      Peer& p = peers_[peer];
      // Classified by wr_id: an error completion's opcode is undefined.
      // A flush error means the QP is in ERROR: often after an error completion of its own
      // (which named the cause first), but not always (a fatal QP event; defect 3).
      if (w.wr_id & kReceiveWr) {
        if (on_receive(peer, w)) {
          out[n++] =
              TransportCompletion{TransportCompletion::Kind::kNotify, peer, ntohl(w.imm_data), 0};
        }
        continue;
      }
      // A send completion: a user write, or a control request (notify, credit update, fence).
      p.send_queue.retire(writes_.retired_by(w.wr_id));
      if (w.wr_id & kControlWr) {
        if (w.status != IBV_WC_SUCCESS) fail_peer(peer, completion_error(w.status));
        continue;
      }
      if (!writes_.holds(w.wr_id)) continue;  // ours are always in range; defensive
      const WriteSlots::Write s = writes_[w.wr_id];
      writes_.release(static_cast<uint32_t>(w.wr_id));
      if (w.status != IBV_WC_SUCCESS) {
        fail_peer(peer, completion_error(w.status));
        continue;
      }
      out[n++] =
          TransportCompletion{TransportCompletion::Kind::kWriteDone, s.peer, s.tag, s.cookie};
    }
  }
  if (drained) act_on_disconnects();
  for (int peer = 0; peer < size(); ++peer) {
    if (peers_[peer].credit_due && !peers_[peer].failed) post_credit(peer);
  }
  flush_gpudirect_writes(out.first(n));
  return n + errors_.drain(out.subspan(n));  // errors found in this poll
}

bool VerbsTransport::on_receive(int peer, const ibv_wc& w) {
  if (w.status != IBV_WC_SUCCESS) {
    fail_peer(peer, completion_error(w.status));
    return false;
  }
  if (w.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(w.wc_flags & IBV_WC_WITH_IMM)) {
    fail_peer(peer, "a receive completion without an immediate (not an eagercomm peer?)");
    return false;
  }
  Peer& p = peers_[peer];
  if (!post_receive(peer).ok()) {
    fail_peer(peer, "cannot post a receive again");
  } else {
    p.returns.on_reposted();
    if (p.returns.due()) post_credit(peer);
  }
  return true;  // delivered even when the repost failed: it arrived before the failure
}

// A peer's disconnect acts once the CQ is drained (defect 5, cm half): what it sent before
// disconnecting completed here first, and its exit notice must not be overtaken by "lost".
void VerbsTransport::act_on_disconnects() {
  for (int peer = 0; peer < size(); ++peer) {
    Peer& p = peers_[peer];
    if (!p.disconnect) continue;
    const std::string why = std::move(*p.disconnect);
    p.disconnect.reset();
    if (p.connected && !p.failed) {
      // A connected peer that disconnects has closed its transport: it left, as a shm peer
      // whose beacon is gone did; no failure unless something is sent to it (as on the store
      // path, where a closed peer's QP simply stops answering).
      p.left = true;
      EC_DEBUG(kNet, "verbs: rank %d disconnected (%s)", peer, why.c_str());
    } else {
      drive(peer, ConnEvent::kDisconnected, why);  // during set-up: a failure
    }
  }
}

// GPUDirect RDMA ordering (what NCCL calls the GDR flush). The NIC writes a peer's data into
// our GPU memory over PCIe, then writes the receive completion into host memory. Seeing the
// completion here proves the data left the NIC, not that the GPU will observe it: PCIe
// writes into GPU memory may still be in flight or be seen by the GPU's own work out of
// order with the completion. So before any notification is delivered (and a consumer may
// launch a kernel reading the data), cudaDeviceFlushGPUDirectRDMAWrites makes every NIC write
// that reached the GPU so far visible to work launched afterwards; work the consumer then
// enqueues on a stream is ordered after it by the host's own program order. Devices that
// already order these writes for their own work (cudaDevAttrGPUDirectRDMAWritesOrdering >=
// owner, e.g. recent GPUs on suitable platforms) skip the call (gpu::flush_rdma_writes).
void VerbsTransport::flush_gpudirect_writes(std::span<const TransportCompletion> delivered) {
  const std::vector<int>& devices = memory_.flush_devices();
  if (devices.empty() || delivered.empty()) return;
  bool notified = false;
  for (const TransportCompletion& c : delivered) {
    notified |= c.kind == TransportCompletion::Kind::kNotify;
  }
  if (!notified) return;
  for (const int device : devices) {
    if (const Status s = gpu::flush_rdma_writes(device); !s.ok()) {
      EC_ERROR(kNet, "verbs: flushing GPUDirect writes to GPU %d failed: %s", device,
               s.to_string().c_str());
    }
  }
}

void VerbsTransport::wait(std::chrono::nanoseconds timeout) {
  if (woken_.exchange(false, std::memory_order_acq_rel)) return;
  if (timeout == std::chrono::nanoseconds::zero() || closed_ || errors_.any()) return;
  // Arms for the next completion; one that came before the arm raises no event, hence the nap
  // bound (the header explains why wait() cannot look at the CQ itself).
  ibv_req_notify_cq(cq_, 0);
  const auto limit = timeout < std::chrono::nanoseconds::zero()
                         ? std::chrono::nanoseconds(kNap)
                         : std::min<std::chrono::nanoseconds>(timeout, kNap);
  // The rdma_cm channel too: set-up events are handled by the driver's next poll().
  pollfd fds[4] = {{channel_->fd, POLLIN, 0},
                   {wake_fd_.get(), POLLIN, 0},
                   {cm_channel_ != nullptr ? cm_channel_->fd : -1, POLLIN, 0},
                   {core_->ctx->async_fd, POLLIN, 0}};
  timespec ts{0, static_cast<long>(limit.count())};
  if (::ppoll(fds, 4, &ts, nullptr) > 0) {
    if (fds[3].revents & POLLIN) async_pending_.store(true, std::memory_order_release);
    if (fds[0].revents & POLLIN) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (api_->get_cq_event(channel_, &cq, &ctx) == 0) api_->ack_cq_events(cq, 1);
    }
    if (fds[1].revents & POLLIN) {
      uint64_t drained;
      [[maybe_unused]] const ssize_t r = ::read(wake_fd_.get(), &drained, sizeof(drained));
    }
  }
}

void VerbsTransport::wake() {
  woken_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t r = ::write(wake_fd_.get(), &one, sizeof(one));
}

}  // namespace eagercomm::verbs
