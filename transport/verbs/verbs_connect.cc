#include "transport/verbs/verbs_connect.h"

namespace eagercomm::verbs {

const char* connect_path_name(ConnectPath path) {
  return path == ConnectPath::kCm ? "rdma_cm" : "store (QP numbers, LID/GID, PSNs)";
}

Result<bool> offers_cm(IbConnectMode mode, bool device_has_ip, const std::string& why_no_ip) {
  switch (mode) {
    case IbConnectMode::kStore:
      return false;
    case IbConnectMode::kAuto:
      return device_has_ip;
    case IbConnectMode::kCm:
      break;
  }
  if (device_has_ip) return true;
  return make_status(
      StatusCode::kInvalidArgument,
      "verbs: EAGERCOMM_IB_CONNECT=cm but the RDMA device has no usable IP address "
      "(%s); configure IPoIB / the RoCE interface, or set EAGERCOMM_IB_CONNECT=store",
      why_no_ip.empty() ? "none found" : why_no_ip.c_str());
}

Result<ConnectPath> choose_connect_path(IbConnectMode mode, bool local_offers_cm,
                                        bool peer_offers_cm, int peer) {
  if (local_offers_cm && peer_offers_cm) return ConnectPath::kCm;
  if (!local_offers_cm && !peer_offers_cm) return ConnectPath::kStore;
  if (mode == IbConnectMode::kCm) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: EAGERCOMM_IB_CONNECT=cm here, but rank %d offers no rdma_cm "
                       "address (its EAGERCOMM_IB_CONNECT is store, or its device has no IP "
                       "address); use the same setting on every rank, or auto",
                       peer);
  }
  // A rank offering cm connects on demand and publishes no queue pairs for the store path.
  return make_status(StatusCode::kInvalidArgument,
                     "verbs: %s rdma_cm and rank %d %s: a job connects every pair one way (a "
                     "rank offering rdma_cm connects on demand and publishes no queue pairs for "
                     "the store path); set EAGERCOMM_IB_CONNECT=store on every rank, or give "
                     "every rank's device an IP address",
                     local_offers_cm ? "this rank offers" : "this rank offers no", peer,
                     peer_offers_cm ? "does (EAGERCOMM_IB_CONNECT=store here, or no IP address "
                                      "on this rank's device)"
                                    : "does not (its EAGERCOMM_IB_CONNECT is store, or its "
                                      "device has no IP address)");
}

const char* conn_state_name(ConnState s) {
  switch (s) {
    case ConnState::kIdle:
      return "idle";
    case ConnState::kAwaitingRequest:
      return "awaiting request";
    case ConnState::kResolvingAddress:
      return "resolving address";
    case ConnState::kResolvingRoute:
      return "resolving route";
    case ConnState::kConnecting:
      return "connecting";
    case ConnState::kReadying:
      return "readying QP";
    case ConnState::kAccepting:
      return "accepting";
    case ConnState::kConnected:
      return "connected";
    case ConnState::kFailed:
      return "failed";
    case ConnState::kClosed:
      return "closed";
  }
  return "?";
}

const char* conn_event_name(ConnEvent e) {
  switch (e) {
    case ConnEvent::kStart:
      return "start";
    case ConnEvent::kFirstSend:
      return "first send";
    case ConnEvent::kAddressResolved:
      return "address resolved";
    case ConnEvent::kRouteResolved:
      return "route resolved";
    case ConnEvent::kConnectRequest:
      return "connect request";
    case ConnEvent::kConnectResponse:
      return "connect response";
    case ConnEvent::kEstablished:
      return "established";
    case ConnEvent::kQpReady:
      return "QP ready";
    case ConnEvent::kQpFailed:
      return "QP failed";
    case ConnEvent::kTransient:
      return "transient error";
    case ConnEvent::kRejected:
      return "rejected";
    case ConnEvent::kRejectedCrossed:
      return "rejected (crossing requests)";
    case ConnEvent::kDisconnected:
      return "disconnected";
    case ConnEvent::kActionFailed:
      return "action failed";
    case ConnEvent::kClose:
      return "close";
  }
  return "?";
}

const char* conn_action_name(ConnAction a) {
  switch (a) {
    case ConnAction::kCreateId:
      return "create id";
    case ConnAction::kResolveAddress:
      return "resolve address";
    case ConnAction::kResolveRoute:
      return "resolve route";
    case ConnAction::kConnect:
      return "connect";
    case ConnAction::kModifyQpFromCm:
      return "modify QP (cm)";
    case ConnAction::kModifyQpFromStore:
      return "modify QP (store)";
    case ConnAction::kAccept:
      return "accept";
    case ConnAction::kEstablish:
      return "establish";
    case ConnAction::kReject:
      return "reject";
    case ConnAction::kRejectCrossed:
      return "reject (crossing requests)";
    case ConnAction::kDisconnect:
      return "disconnect";
    case ConnAction::kDestroyId:
      return "destroy id";
    case ConnAction::kReportConnected:
      return "report connected";
    case ConnAction::kReportFailure:
      return "report failure";
  }
  return "?";
}

bool Connection::has_id() const {
  if (path_ != ConnectPath::kCm) return false;
  switch (state_) {
    case ConnState::kResolvingAddress:
    case ConnState::kResolvingRoute:
    case ConnState::kConnecting:
    case ConnState::kAccepting:
    case ConnState::kReadying:
    case ConnState::kConnected:
      return true;
    default:
      return false;
  }
}

bool Connection::before_qp() const {
  return path_ == ConnectPath::kCm && active_ &&
         (state_ == ConnState::kResolvingAddress || state_ == ConnState::kResolvingRoute ||
          state_ == ConnState::kConnecting);
}

std::vector<ConnAction> Connection::fail(const std::string& why, bool id) {
  std::vector<ConnAction> out;
  if (id) out.push_back(ConnAction::kDestroyId);
  out.push_back(ConnAction::kReportFailure);
  error_ = why;
  state_ = ConnState::kFailed;
  return out;
}

std::vector<ConnAction> Connection::on(ConnEvent e, const std::string& detail) {
  using A = ConnAction;
  using S = ConnState;
  const bool cm = path_ == ConnectPath::kCm;
  const auto with = [&detail](std::string what) {
    return detail.empty() ? what : what + ": " + detail;
  };
  // Finished connections ignore everything; a late request still gets an answer (a refusal)
  // so the peer does not wait for its timeout.
  if (state_ == S::kFailed || state_ == S::kClosed) {
    if (e == ConnEvent::kConnectRequest) return {A::kReject};
    return {};
  }
  if (e == ConnEvent::kClose) {
    std::vector<A> out;
    if (cm && state_ == S::kConnected) out.push_back(A::kDisconnect);
    if (has_id()) out.push_back(A::kDestroyId);
    state_ = S::kClosed;
    return out;
  }
  const auto unexpected = [&] {
    return fail(std::string("rdma_cm event \"") + conn_event_name(e) + "\" while " +
                    conn_state_name(state_) + " (" + (active_ ? "active" : "passive") + " side)",
                has_id());
  };
  switch (e) {
    case ConnEvent::kStart:
      if (started_) return {};
      started_ = true;
      if (!cm) {
        state_ = S::kReadying;
        return {A::kModifyQpFromStore};
      }
      if (state_ == S::kIdle) state_ = S::kAwaitingRequest;  // else the request came first
      return {};
    case ConnEvent::kFirstSend:
      // Under way already (either side started), or waiting for the peer that won a crossing.
      if (cm && state_ == S::kIdle) return unexpected();  // the peer's address is not known
      if (!cm || state_ != S::kAwaitingRequest || yielded_) return {};
      active_ = true;
      state_ = S::kResolvingAddress;
      return {A::kCreateId, A::kResolveAddress};
    case ConnEvent::kAddressResolved:
      if (!cm || !active_ || state_ != S::kResolvingAddress) return unexpected();
      state_ = S::kResolvingRoute;
      return {A::kResolveRoute};
    case ConnEvent::kRouteResolved:
      if (!cm || !active_ || state_ != S::kResolvingRoute) return unexpected();
      state_ = S::kConnecting;
      return {A::kConnect};
    case ConnEvent::kConnectResponse:
      if (!cm || !active_ || state_ != S::kConnecting) return unexpected();
      state_ = S::kReadying;
      return {A::kModifyQpFromCm};
    case ConnEvent::kConnectRequest:
      // Both sides started at once: the higher rank's attempt goes on, the lower rank drops its
      // own (its queue pair is untouched) and takes the request instead.
      if (before_qp()) {
        if (wins_crossing_) return {A::kRejectCrossed};
        active_ = false;
        yielded_ = true;
        state_ = S::kReadying;
        return {A::kDestroyId, A::kModifyQpFromCm};
      }
      // Otherwise requests are taken once, by a side that has not started its own: a duplicate
      // (the peer retried after a lost reply) or a request on the wrong side is refused.
      if (!cm || active_ || (state_ != S::kIdle && state_ != S::kAwaitingRequest)) {
        return {A::kReject};
      }
      state_ = S::kReadying;
      return {A::kModifyQpFromCm};
    case ConnEvent::kQpReady:
      if (state_ != S::kReadying) return unexpected();
      if (!cm) {
        state_ = S::kConnected;
        return {A::kReportConnected};
      }
      if (active_) {
        state_ = S::kConnected;
        return {A::kEstablish, A::kReportConnected};
      }
      state_ = S::kAccepting;
      return {A::kAccept};
    case ConnEvent::kQpFailed:
      return fail(with("moving the QP to RTR/RTS failed"), has_id());
    case ConnEvent::kEstablished:
      if (state_ == S::kConnected) return {};  // the active side's own, after rdma_establish
      if (!cm || active_ || state_ != S::kAccepting) return unexpected();
      state_ = S::kConnected;
      return {A::kReportConnected};
    case ConnEvent::kTransient: {
      // The active side retries from the start while its QP is untouched (the passive side
      // moves its QP only on a request it accepts, and then the pair completes or fails).
      const bool untouched = before_qp();
      if (untouched && retries_left_ > 0) {
        --retries_left_;
        state_ = S::kResolvingAddress;
        return {A::kDestroyId, A::kCreateId, A::kResolveAddress};
      }
      return fail(with(untouched ? "rdma_cm could not reach the peer (retries used up)"
                                 : "rdma_cm error during set-up"),
                  has_id());
    }
    case ConnEvent::kRejected:
      return fail(with("the peer rejected the rdma_cm connection"), has_id());
    case ConnEvent::kRejectedCrossed:
      // The peer's request is on its way: wait for it (and do not start again).
      if (!before_qp() || wins_crossing_) return unexpected();
      active_ = false;
      yielded_ = true;
      state_ = S::kAwaitingRequest;
      return {A::kDestroyId};
    case ConnEvent::kDisconnected:
      return fail(
          with(state_ == S::kConnected ? "the peer disconnected" : "disconnected during set-up"),
          has_id());
    case ConnEvent::kActionFailed:
      return fail(with("an rdma_cm call failed"), has_id());
    case ConnEvent::kClose:
      break;  // handled above
  }
  return unexpected();
}

}  // namespace eagercomm::verbs
