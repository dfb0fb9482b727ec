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
  const UcxAddressHeader& h = decoded.header;
  const uint8_t* worker_address = decoded.worker_address.data();
  Peer& p = peers_[peer];
  if (p.ep) {
    if (std::equal(address.begin(), address.end(), p.address.begin(), p.address.end())) {
      return Status::Ok();
    }
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: connect: rank %d is already connected with a different address", peer);
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(worker_address);
  // Peer-failure handling wherever shared memory cannot be used: UCX 1.13's shared-memory
  // transports do not support it, so asking for it on one host would silently move the pair
  // to TCP. Both sides of a pair compute the same answer from the same facts.
  const bool same_host = h.host == host_;
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
  p.instance = h.instance;
  p.address.assign(address.begin(), address.end());
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
  if (!same_host) std::erase(ring_senders_, peer);
  if (same_host) {
    Result<LivenessWatch> live = LivenessWatch::open(beacon_name(job_, h.instance));
    if (live.ok()) {
      p.live = std::move(live.value());
      watching_.store(true, std::memory_order_relaxed);
    } else {
      EC_DEBUG(kNet, "ucx: no liveness beacon of rank %d: %s", peer,
               live.status().message().c_str());
    }
  }
  p.handles_failure = ep.err_mode == UCP_ERR_HANDLING_MODE_PEER;
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
