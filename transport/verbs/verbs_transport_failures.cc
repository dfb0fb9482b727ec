// How the verbs transport loses a peer (verbs_transport.h, "Failures"): an error completion, an
// async event of the device (a QP, CQ or port in error), or a broken connection; each failure
// is logged once and queued as one kPeerError.
#include <cstdio>

#include "transport/transport_log.h"
#include "transport/verbs/verbs_transport_impl.h"

namespace eagercomm::verbs {

std::string VerbsTransport::completion_error(ibv_wc_status status) const {
  if (status == IBV_WC_WR_FLUSH_ERR) {
    return "its queue pair entered the error state (work requests flushed)";
  }
  return api_->wc_status_str(status);
}

std::string VerbsTransport::retry_window() const {
  const double seconds = 4.096e-6 * static_cast<double>(uint64_t{1} << qp_settings_.timeout) *
                         (qp_settings_.retry_cnt + 1);
  char text[64];
  std::snprintf(text, sizeof(text), "%.3g s", seconds);
  return text;
}

void VerbsTransport::fail_all(const std::string& why) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) fail_peer(peer, why);
  }
}

void VerbsTransport::read_async_events() {
  ibv_async_event e;
  while (api_->get_async_event(core_->ctx, &e) == 0) {
    const char* what = api_->event_type_str(e.event_type);
    switch (e.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
        if (const auto qp = qp_to_peer_.find(e.element.qp->qp_num); qp != qp_to_peer_.end()) {
          fail_peer(qp->second, std::string("async event: ") + what);
        }
        break;
      case IBV_EVENT_CQ_ERR:
      case IBV_EVENT_DEVICE_FATAL:
        fail_all(std::string("async event: ") + what);
        break;
      case IBV_EVENT_PORT_ERR:
        // Not a peer failure yet: a link that flaps back within the retries loses nothing, and
        // one that stays down fails every write with RETRY_EXC, which names the peers.
        EC_WARN(kNet, "verbs: %s port %u went down (async event: %s); writes retry for %s",
                endpoint_.device.c_str(), e.element.port_num, what, retry_window().c_str());
        break;
      default:  // port active, LID / P_Key / GID changes, SM changes, COMM_EST, ...
        EC_INFO(kNet, "verbs: %s port %u: async event: %s", endpoint_.device.c_str(),
                endpoint_.port, what);
        break;
    }
    api_->ack_async_event(&e);
  }
}

void VerbsTransport::fail_peer(int peer, const std::string& why) {
  Peer& p = peers_[peer];
  if (p.failed) return;
  p.failed = true;
  p.failed_why = why;
  EC_ERROR(kNet, "verbs: lost rank %d: %s", peer, why.c_str());
  errors_.push(TransportCompletion::Kind::kPeerError, peer, 0, 0);
}

}  // namespace eagercomm::verbs
