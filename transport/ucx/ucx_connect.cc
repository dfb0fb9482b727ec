#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "transport/transport_log.h"
#include "transport/ucx/ucx_transport_impl.h"
#include "transport/ucx/ucx_wire.h"

namespace eagercomm::ucx {

Status UcxTransport::connect(int peer, std::span<const uint8_t> address) {
  EC_RETURN_IF_ERROR(check_peer(peer, "connect"));
  EC_ASSIGN_OR_RETURN(const UcxAddress decoded, ucx_decode_address(address, peer));
  Peer& p = peers_[peer];
  if (!p.address.empty()) {
    if (std::equal(address.begin(), address.end(), p.address.begin(), p.address.end())) {
      return Status::Ok();
    }
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: connect: rank %d is already connected with a different address", peer);
  }
  // The endpoint is made on first use (open_ep): a rank of a large job holds endpoints to the
  // peers it talks to, not to all.
  p.instance = decoded.header.instance;
  p.address.assign(address.begin(), address.end());
  // A peer on another host notifies by active messages: its ring here stays empty.
  if (decoded.header.host != host_) std::erase(ring_senders_, peer);
  return Status::Ok();
}

Status UcxTransport::open_ep(int peer) {
  Peer& p = peers_[peer];
  if (p.ep) return Status::Ok();
  if (p.address.empty()) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: rank %d is not connected (connect() it first)", peer);
  }
  if (p.failed) return check_sendable(peer, "connect");
  EC_ASSIGN_OR_RETURN(const UcxAddress decoded, ucx_decode_address(p.address, peer));
  const UcxAddressHeader& h = decoded.header;
  const uint8_t* worker_address = decoded.worker_address.data();
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(worker_address);
  // Peer-failure handling wherever shared memory cannot be used: UCX 1.13's shared-memory
  // transports do not support it, so asking for it on one host would silently move the pair
  // to TCP. Both sides of a pair compute the same answer from the same facts.
  const bool same_host = h.host == host_;
  // A peer on this host is watched from the start; one whose process is gone already (it died
  // before this rank first needed it) is reported as such, not as whatever ucp_ep_create makes
  // of its stale address.
  if (same_host && !p.live.valid()) {
    Result<LivenessWatch> live = LivenessWatch::open(beacon_name(job_, h.instance));
    if (live.ok()) {
      p.live = std::move(live.value());
      watching_.store(true, std::memory_order_relaxed);
      if (p.live.check() == LivenessWatch::State::kDead) {
        p.live.reap();
        p.failed = true;
        p.failed_why =
            "ucx: rank " + std::to_string(peer) + "'s process is gone (killed or crashed)";
        EC_ERROR(kNet, "%s", p.failed_why.c_str());
        done_.push(TransportCompletion::Kind::kPeerError, peer, 0, 0);
        return make_status(StatusCode::kPeerFailed, "%s", p.failed_why.c_str());
      }
    } else {
      EC_DEBUG(kNet, "ucx: no liveness beacon of rank %d: %s", peer,
               live.status().message().c_str());
    }
  }
  ep.err_mode =
      same_host && shared_memory_ ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::on_ep_error;
  ep.err_handler.arg = &p;
  const ucs_status_t s = ucp_ep_create(core_->worker, &ep, &p.ep);
  if (s != UCS_OK) {
    p.ep = nullptr;
    return ucx_failure(s, "rank " + std::to_string(rank()) + " cannot reach rank " +
                              std::to_string(peer) + " (" + tls_hint() + ")");
  }
  ++connected_peers_;
  // Notifications: ring pushes where the peer's region maps here, active messages elsewhere.
  Result<std::unique_ptr<RemoteRegion>> ring_region = import_region(peer, decoded.notify_key);
  if (!ring_region.ok()) {
    Status e = ring_region.status();
    e.prepend("ucx: the notification region in rank " + std::to_string(peer) + "'s address: ");
    return e;
  }
  if (auto* mapped = static_cast<uint8_t*>(mapped_address(*ring_region.value()));
      mapped != nullptr && peer != rank()) {
    if (ring_region.value()->size() <
        notify_ring::block_bytes(kNotifyBlockBytes, size(), h.ring_capacity)) {
      return make_status(StatusCode::kProtocolError,
                         "ucx: rank %d's notification region has %zu bytes, too few for %d rings "
                         "of %u entries",
                         peer, ring_region.value()->size(), size(), h.ring_capacity);
    }
    p.ring = notify_ring::producer_at(mapped, kNotifyBlockBytes, rank(), h.ring_capacity);
    p.sleepers = &reinterpret_cast<NotifyBlock*>(mapped)->sleepers;
  }
  p.notify_region = std::move(ring_region.value());
  p.handles_failure = ep.err_mode == UCP_ERR_HANDLING_MODE_PEER;
  if (send_control(peer, kHello).code() == StatusCode::kBusy) {
    p.hello_due = true;
    any_wake_due_ = true;  // retried with the wake-ups (send_due_controls)
  }
  EC_DEBUG(kNet, "ucx: connecting to rank %d (%s host, peer failures %s, notifications by %s)",
           peer, same_host ? "same" : "another",
           ep.err_mode == UCP_ERR_HANDLING_MODE_PEER ? "handled" : "not handled",
           p.ring.attached() ? "ring stores" : "active messages");
  return Status::Ok();
}

void UcxTransport::peer_failed(int peer, ucs_status_t status, const char* what) {
  Peer& p = peers_[peer];
  if (p.failed) return;
  p.failed = true;
  p.failed_why = std::string("ucx: ") + what + " failed: " + ucs_status_string(status);
  EC_ERROR(kNet, "ucx: %s to rank %d failed: %s; the peer is treated as lost", what, peer,
           ucs_status_string(status));
  done_.push(TransportCompletion::Kind::kPeerError, peer, 0, 0);
}

// Runs inside the driver's ucp_worker_progress() (or our destructor's).
ucs_status_t UcxTransport::on_control(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  (void)data;
  (void)param;
  auto* self = static_cast<UcxTransport*>(arg);
  if (self == nullptr) return UCS_OK;
  NoteHeader h;
  if (header_length != sizeof(h) || length != 0) return UCS_OK;
  std::memcpy(&h, header, sizeof(h));
  if (h.sender < 0 || h.sender >= self->size()) return UCS_OK;
  Peer& p = self->peers_[h.sender];
  if (h.tag == kBye) {
    EC_DEBUG(kNet, "ucx: rank %d closed its transport", h.sender);
    p.bye_received = true;
    if (!self->closing_) self->acks_due_.push_back(h.sender);
  } else if (h.tag == kByeAck) {
    p.answered = true;
  } else if (h.tag == kHello) {
    p.knows_us = true;
    if (!self->closing_) self->hello_acks_due_.push_back(h.sender);
  } else if (h.tag == kHelloAck) {
    p.hello_acked = true;
  }
  // kWake needs nothing: its arrival woke the worker's event fd.
  return UCS_OK;
}

// UCX lost the endpoint (peer-failure mode only). Expected after the peer said goodbye or
// while we close; anything else is a lost peer.
void UcxTransport::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  Peer* p = static_cast<Peer*>(arg);
  UcxTransport* self = p->owner;
  p->ep_failed = true;
  if (p->bye_received || self->closing_) {
    EC_DEBUG(kNet, "ucx: connection to rank %d ended: %s", p->rank, ucs_status_string(status));
    return;
  }
  self->peer_failed(p->rank, status, "the connection");
}

Status UcxTransport::ready_to_send(int peer) {
  Peer& p = peers_[peer];
  if (p.hello_acked) return Status::Ok();
  if (closed_) return check_sendable(peer, "send");
  EC_RETURN_IF_ERROR(open_ep(peer));
  if (p.bye_received || p.failed) return check_sendable(peer, "send");
  if (p.hello_due && send_control(peer, kHello).ok()) p.hello_due = false;
  // The handshake moves only with the worker's progress (the endpoint's wire-up, the hello, its
  // answer), which poll() otherwise runs every kRingPollsPerProgress calls: a rank that only
  // heartbeats from its watchdog (one pass per interval) would take seconds to connect.
  (void)ucp_worker_progress(core_->worker);
  progress_due_.store(true, std::memory_order_relaxed);
  return p.hello_acked ? Status::Ok() : Status(StatusCode::kBusy, {});
}

TransportCaps UcxTransport::capabilities() const { return {.connects_on_demand = true}; }

bool UcxTransport::peer_left(int peer) const {
  return peer >= 0 && peer < size() && peers_[peer].bye_received;
}

Status UcxTransport::peer_error(int peer) const {
  if (peer >= 0 && peer < size() && !peers_[peer].failed_why.empty()) {
    return make_status(StatusCode::kPeerFailed, "%s", peers_[peer].failed_why.c_str());
  }
  return Transport::peer_error(peer);
}

}  // namespace eagercomm::ucx
