// The rdma_cm path of the verbs transport (verbs_transport.h): the listener on this device's IP,
// the ids of each pair, the CM's events fed to each pair's connection (verbs_connect.h), and the
// queue-pair transitions with the attributes the CM derives.
#include <arpa/inet.h>
#include <fcntl.h>

#include <cstring>
#include <deque>
#include <utility>

#include "transport/transport_log.h"
#include "transport/verbs/verbs_transport_impl.h"

namespace eagercomm::verbs {

Status VerbsTransport::setup_cm(const TransportConfig& config, const CmAddress& ip) {
  connect_mode_ = config.ib_connect;
  if (connect_mode_ == IbConnectMode::kStore) return Status::Ok();
  EC_ASSIGN_OR_RETURN(const bool offer, offers_cm(connect_mode_, ip.found, ip.why_none));
  if (!offer) {
    EC_INFO(kNet, "verbs: not offering rdma_cm: %s; queue pairs connect through the store",
            ip.why_none.c_str());
    return Status::Ok();
  }
  // In auto mode a failure below only loses the cm path; with cm asked for it is an error.
  const auto give_up = [this](const std::string& why) -> Status {
    if (connect_mode_ == IbConnectMode::kCm) {
      return make_status(StatusCode::kUnavailable, "verbs: EAGERCOMM_IB_CONNECT=cm: %s",
                         why.c_str());
    }
    EC_INFO(kNet, "verbs: not offering rdma_cm: %s; queue pairs connect through the store",
            why.c_str());
    return Status::Ok();
  };
  cm_source_ = {};
  if (ip.family == 4) {
    auto& in = reinterpret_cast<sockaddr_in&>(cm_source_);
    in.sin_family = AF_INET;
    std::memcpy(&in.sin_addr, ip.ip.data(), 4);
  } else {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(cm_source_);
    in6.sin6_family = AF_INET6;
    std::memcpy(&in6.sin6_addr, ip.ip.data(), 16);
  }
  cm_channel_ = api_->create_event_channel();
  if (cm_channel_ == nullptr) return give_up("rdma_create_event_channel: " + errno_text());
  if (fcntl(cm_channel_->fd, F_SETFL, fcntl(cm_channel_->fd, F_GETFL) | O_NONBLOCK) != 0) {
    return give_up("rdma_cm event channel fd: " + errno_text());
  }
  // The listener's context marks requests (accepted ids inherit it until adopted by a peer).
  if (api_->create_id(cm_channel_, &listen_id_, reinterpret_cast<void*>(intptr_t{-1}),
                      RDMA_PS_TCP) != 0) {
    return give_up("rdma_create_id: " + errno_text());
  }
  if (api_->bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&cm_source_)) != 0) {
    return give_up("rdma_bind_addr(" + ip.to_string() + "): " + errno_text());
  }
  if (listen_id_->verbs == nullptr ||
      endpoint_.device != api_->get_device_name(listen_id_->verbs->device) ||
      listen_id_->port_num != endpoint_.port) {
    return give_up(ip.to_string() + " is not on " + endpoint_.device);
  }
  if (api_->listen(listen_id_, kCmBacklog) != 0) return give_up("rdma_listen: " + errno_text());
  offers_cm_ = true;
  EC_INFO(kNet, "verbs: listening for rdma_cm on %s port %u", ip.to_string().c_str(),
          ntohs(api_->get_src_port(listen_id_)));
  return Status::Ok();
}

// The QP stays ours (rdma_cm calls it user-managed): rdma_init_qp_attr() derives the attributes
// of each step (P_Key index, path, MTU, SL, remote QP number, PSNs) from the CM exchange on the
// pair's id, and they apply to a QP of the same device opened through another context. The
// INIT -> INIT step takes the CM's P_Key index (the QP was made with index 0: wrong on a
// partitioned fabric); apply_qp_settings() then sets what must match the store path (defect 10).
Status VerbsTransport::modify_qp_from_cm(int peer) {
  Peer& p = peers_[peer];
  for (const ibv_qp_state state : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    const char* name = state == IBV_QPS_INIT ? "INIT" : state == IBV_QPS_RTR ? "RTR" : "RTS";
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = state;
    if (api_->init_qp_attr(p.id, &attr, &mask) != 0) {
      return make_status(StatusCode::kUnavailable, "rdma_init_qp_attr(%s) for rank %d: %s", name,
                         peer, errno_text().c_str());
    }
    apply_qp_settings(qp_settings_, attr, mask);
    if (api_->modify_qp(p.qp, &attr, mask) != 0) {
      return make_status(StatusCode::kUnavailable, "QP to rank %d to %s: %s", peer, name,
                         errno_text().c_str());
    }
  }
  return Status::Ok();
}

rdma_conn_param VerbsTransport::conn_param(int peer, std::vector<uint8_t>& hello) const {
  hello = encode_hello({rank(), peer, instance_});
  rdma_conn_param cp{};
  cp.private_data = hello.data();
  cp.private_data_len = static_cast<uint8_t>(hello.size());
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = qp_settings_.retry_cnt;
  cp.rnr_retry_count = qp_settings_.rnr_retry;
  cp.qp_num = peers_[peer].qp->qp_num;
  return cp;
}

Status VerbsTransport::perform(int peer, ConnAction a, rdma_cm_id* request) {
  using A = ConnAction;
  Peer& p = peers_[peer];
  const auto failed = [&](const char* call) {
    return make_status(StatusCode::kUnavailable, "%s: %s", call, errno_text().c_str());
  };
  std::vector<uint8_t> hello;
  switch (a) {
    case A::kCreateId:
      if (api_->create_id(cm_channel_, &p.id, reinterpret_cast<void*>(intptr_t{peer}),
                          RDMA_PS_TCP) != 0) {
        p.id = nullptr;
        return failed("rdma_create_id");
      }
      return Status::Ok();
    case A::kResolveAddress: {
      sockaddr_storage dst{};
      const QpAddress& pa = p.address;
      if (pa.cm_family == 4) {
        auto& in = reinterpret_cast<sockaddr_in&>(dst);
        in.sin_family = AF_INET;
        in.sin_port = htons(pa.cm_port);
        std::memcpy(&in.sin_addr, pa.cm_ip.data(), 4);
      } else {
        auto& in6 = reinterpret_cast<sockaddr_in6&>(dst);
        in6.sin6_family = AF_INET6;
        in6.sin6_port = htons(pa.cm_port);
        std::memcpy(&in6.sin6_addr, pa.cm_ip.data(), 16);
      }
      sockaddr_storage src = cm_source_;
      if (api_->resolve_addr(p.id, reinterpret_cast<sockaddr*>(&src),
                             reinterpret_cast<sockaddr*>(&dst), kCmTimeoutMs) != 0) {
        return failed("rdma_resolve_addr");
      }
      return Status::Ok();
    }
    case A::kResolveRoute:
      return api_->resolve_route(p.id, kCmTimeoutMs) == 0 ? Status::Ok()
                                                          : failed("rdma_resolve_route");
    case A::kConnect: {
      rdma_conn_param cp = conn_param(peer, hello);
      return api_->connect(p.id, &cp) == 0 ? Status::Ok() : failed("rdma_connect");
    }
    case A::kModifyQpFromCm:
      if (p.id == nullptr && request != nullptr) {  // the passive side adopts the request's id
        p.id = request;
        p.id->context = reinterpret_cast<void*>(intptr_t{peer});
      }
      return modify_qp_from_cm(peer);
    case A::kModifyQpFromStore:
      return modify_qp_from_store(peer);
    case A::kAccept: {
      rdma_conn_param cp = conn_param(peer, hello);
      return api_->accept(p.id, &cp) == 0 ? Status::Ok() : failed("rdma_accept");
    }
    case A::kEstablish:
      return api_->establish(p.id) == 0 ? Status::Ok() : failed("rdma_establish");
    case A::kReject:
    case A::kRejectCrossed:
      if (request != nullptr) {
        // A crossing's refusal carries our hello: the peer then waits for our request rather
        // than failing (progress_cm, RDMA_CM_EVENT_REJECTED).
        if (a == A::kRejectCrossed) hello = encode_hello({rank(), peer, instance_});
        api_->reject(request, hello.empty() ? nullptr : hello.data(),
                     static_cast<uint8_t>(hello.size()));
        api_->destroy_id(request);  // its event was acknowledged before (progress_cm)
      }
      return Status::Ok();
    case A::kDisconnect:
      if (p.id != nullptr) api_->disconnect(p.id);
      return Status::Ok();
    case A::kDestroyId:
      if (p.id != nullptr) api_->destroy_id(p.id);
      p.id = nullptr;
      return Status::Ok();
    case A::kReportConnected:
      p.connected = true;
      EC_DEBUG(kNet, "verbs: connected to rank %d (%s)", peer, connect_path_name(p.conn->path()));
      return Status::Ok();
    case A::kReportFailure:
      fail_peer(peer, "connection: " + p.conn->error());
      return Status::Ok();
  }
  return Status::Ok();
}

void VerbsTransport::drive(int peer, ConnEvent e, const std::string& detail, rdma_cm_id* request) {
  using A = ConnAction;
  Peer& p = peers_[peer];
  std::deque<std::pair<ConnEvent, std::string>> events{{e, detail}};
  while (!events.empty()) {
    auto [event, why] = std::move(events.front());
    events.pop_front();
    for (const A a : p.conn->on(event, why)) {
      const Status s = perform(peer, a, request);
      const bool modify = a == A::kModifyQpFromCm || a == A::kModifyQpFromStore;
      if (!s.ok()) {
        // The rest of this batch depended on the failed step.
        events.emplace_back(modify ? ConnEvent::kQpFailed : ConnEvent::kActionFailed,
                            std::string(s.message()));
        break;
      }
      if (modify) events.emplace_back(ConnEvent::kQpReady, std::string());
    }
  }
}

void VerbsTransport::on_connect_request(rdma_cm_id* id, std::span<const uint8_t> data) {
  const auto hello = decode_hello(data, rank(), size());
  if (!hello.ok()) {
    EC_WARN(kNet, "verbs: refused an rdma_cm request: %s",
            std::string(hello.status().message()).c_str());
    api_->reject(id, nullptr, 0);
    api_->destroy_id(id);
    return;
  }
  const int peer = hello.value().from;
  Peer& p = peers_[peer];
  if (!p.conn) {  // before our connect(): the address comes later
    p.conn = std::make_unique<Connection>(ConnectPath::kCm, cm_wins_crossing(rank(), peer));
    p.hello_instance = hello.value().instance;
  } else if (p.known && hello.value().instance != p.address.instance) {
    EC_WARN(kNet, "verbs: refused an rdma_cm request from another instance of rank %d", peer);
    api_->reject(id, nullptr, 0);
    api_->destroy_id(id);
    return;
  }
  // The peer connects on demand: our queue pair for it is made now, when it first sends.
  if (const Status s = create_queue_pair(peer); !s.ok()) {
    api_->reject(id, nullptr, 0);
    api_->destroy_id(id);
    fail_peer(peer, std::string(s.message()));
    return;
  }
  drive(peer, ConnEvent::kConnectRequest, {}, id);
}

void VerbsTransport::progress_cm() {
  if (cm_channel_ == nullptr) return;
  rdma_cm_event* event = nullptr;
  while (api_->get_cm_event(cm_channel_, &event) == 0) {
    // Copied, then acknowledged before acting: rdma_destroy_id() waits for the acknowledgement
    // of every event of its id, and an action below may destroy it.
    const rdma_cm_event_type type = event->event;
    rdma_cm_id* id = event->id;
    const int status = event->status;
    const auto* pd = static_cast<const uint8_t*>(event->param.conn.private_data);
    const std::vector<uint8_t> data(pd,
                                    pd == nullptr ? pd : pd + event->param.conn.private_data_len);
    api_->ack_cm_event(event);
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      on_connect_request(id, data);
      continue;
    }
    const auto peer = static_cast<int>(reinterpret_cast<intptr_t>(id->context));
    if (id == listen_id_ || peer < 0 || peer >= size() || !peers_[peer].conn) continue;
    const std::string detail = std::string(api_->event_str(type)) +
                               (status != 0 ? " (status " + std::to_string(status) + ")" : "");
    using E = ConnEvent;
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        drive(peer, E::kAddressResolved);
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        drive(peer, E::kRouteResolved);
        break;
      case RDMA_CM_EVENT_CONNECT_RESPONSE: {
        const auto hello = decode_hello(data, rank(), size());
        if (!hello.ok() || hello.value().from != peer ||
            hello.value().instance != peers_[peer].address.instance) {
          drive(peer, E::kActionFailed,
                hello.ok() ? "the rdma_cm reply came from another rank or instance"
                           : std::string(hello.status().message()));
        } else {
          drive(peer, E::kConnectResponse);
        }
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
        drive(peer, E::kEstablished);
        break;
      case RDMA_CM_EVENT_ADDR_ERROR:
      case RDMA_CM_EVENT_ROUTE_ERROR:
      case RDMA_CM_EVENT_UNREACHABLE:
      case RDMA_CM_EVENT_CONNECT_ERROR:
        drive(peer, E::kTransient, detail);
        break;
      case RDMA_CM_EVENT_REJECTED: {
        // With the peer's hello, our requests crossed and the peer's wins (verbs_connect.h).
        const auto hello = decode_hello(data, rank(), size());
        const bool crossed = hello.ok() && hello.value().from == peer &&
                             hello.value().instance == peers_[peer].address.instance;
        drive(peer, crossed ? E::kRejectedCrossed : E::kRejected, detail);
        break;
      }
      case RDMA_CM_EVENT_DISCONNECTED:
        peers_[peer].disconnect = detail;  // after the CQ is drained: poll()
        break;
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        drive(peer, E::kDisconnected, detail);
        break;
      default:
        break;  // TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do
    }
  }
}

}  // namespace eagercomm::verbs
