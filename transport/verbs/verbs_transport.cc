// The verbs transport (verbs_transport.h for the protocol, verbs_transport_impl.h for how the
// class is laid out over its files): creation (device, port, protection domain, completion
// queue, a queue pair per peer, the address it publishes), import_region(), connect() and the
// store path's queue-pair transitions.
#include "transport/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>

#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_verbs.h"
#include "transport/verbs/verbs_transport_impl.h"

namespace eagercomm {
namespace verbs {
namespace {

ibv_mtu mtu_enum(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    default:
      return IBV_MTU_4096;
  }
}

uint64_t random_instance() {
  std::random_device entropy;
  return (uint64_t{entropy()} << 32) | entropy();
}

// Makes `fd` non-blocking; false (errno set) when it cannot.
bool set_nonblocking(int fd) { return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0; }

}  // namespace

VerbsTransport::VerbsTransport(int rank, int size, const VerbsApi& api)
    : Transport(rank, size),
      core_(std::make_shared<Core>(api)),
      api_(&core_->api),
      instance_(random_instance()),
      memory_(core_, rank, instance_) {}

Status VerbsTransport::init(const TransportConfig& config) {
  // Before this process registers anything through the table (defect 7).
  if (const ForkProtectionResult fork = enable_fork_protection(*api_);
      fork.state == ForkProtection::kFailed) {
    static std::once_flag warned;
    std::call_once(warned,
                   [&] { EC_WARN(kNet, "verbs: no fork protection: %s", fork.why.c_str()); });
  }
  qp_settings_ = qp_settings(config);
  CmAddress ip;
  EC_RETURN_IF_ERROR(choose_port(config, ip));
  EC_RETURN_IF_ERROR(open_device());
  EC_ASSIGN_OR_RETURN(credit_in_, allocate(static_cast<size_t>(size()) * 8, MemoryKind::kHost));
  EC_ASSIGN_OR_RETURN(credit_out_, allocate(static_cast<size_t>(size()) * 8, MemoryKind::kHost));
  peers_.resize(size());
  QpAddress a;
  a.rank = rank();
  a.job_size = static_cast<uint32_t>(size());
  a.instance = instance_;
  a.link = static_cast<uint8_t>(endpoint_.link);
  a.port = endpoint_.port;
  a.lid = endpoint_.lid;
  a.mtu = endpoint_.mtu >= 256 ? endpoint_.mtu : 1024;
  a.use_gid = endpoint_.use_gid;
  a.gid_index = static_cast<uint8_t>(endpoint_.gid_index);
  a.gid_roce_v2 = endpoint_.gid.roce_v2;
  a.gid = endpoint_.gid.raw;
  a.credit_addr = reinterpret_cast<uintptr_t>(credit_in_->data());
  a.credit_rkey = static_cast<const VerbsRegion&>(*credit_in_).rkey();
  EC_RETURN_IF_ERROR(setup_cm(config, ip));
  // Over rdma_cm the queue pairs are made when first needed (connect_on_demand()): a rank of a
  // large job holds those of the peers it talks to, and its address carries none.
  if (!offers_cm_) EC_RETURN_IF_ERROR(create_queue_pairs(a));
  if (offers_cm_) {
    a.offers_cm = true;
    if (cm_source_.ss_family == AF_INET) {
      const auto& in = reinterpret_cast<const sockaddr_in&>(cm_source_);
      a.cm_family = 4;
      std::memcpy(a.cm_ip.data(), &in.sin_addr, 4);
    } else {
      const auto& in6 = reinterpret_cast<const sockaddr_in6&>(cm_source_);
      a.cm_family = 6;
      std::memcpy(a.cm_ip.data(), &in6.sin6_addr, 16);
    }
    a.cm_port = ntohs(api_->get_src_port(listen_id_));
  }
  address_ = encode_address(a);
  EC_INFO(kNet, "verbs: on %s port %u (%s)%s; connects by %s", endpoint_.device.c_str(),
          endpoint_.port, link_layer_name(endpoint_.link),
          endpoint_.use_gid ? (" GID " + endpoint_.gid.to_string()).c_str() : "",
          offers_cm_ ? "rdma_cm, on demand" : "the store, every pair at creation");
  return Status::Ok();
}

Status VerbsTransport::choose_port(const TransportConfig& config, CmAddress& ip) {
  const DeviceList list = list_verbs_devices(*api_);
  // No GPU is known here (a transport serves host and GPU buffers alike): the NUMA node decides,
  // and the local rank spreads a host's ranks over equally near NICs.
  Locality here;
  here.numa_node = current_numa_node();
  EC_ASSIGN_OR_RETURN(endpoint_, choose_endpoint(list.devices, config, list.reason, here));
  // The IP rdma_cm would use (listened on, and on RoCE the address whose GID the port uses).
  if (config.ib_connect != IbConnectMode::kStore ||
      (endpoint_.link == LinkLayer::kEthernet &&
       config.ib_gid_index == TransportConfig::kAutoIndex)) {
    ip = find_cm_address(*api_, endpoint_.device, endpoint_.port);
  }
  if (endpoint_.link == LinkLayer::kEthernet &&
      config.ib_gid_index == TransportConfig::kAutoIndex && ip.found) {
    // Defect 8: the GID of that IP, not the port's first IPv4 one (maybe another VLAN's).
    const PortInfo* port = find_port(list.devices, endpoint_);
    if (const int i = port != nullptr ? roce_gid_of_ip(*port, ip.family, ip.ip) : -1; i >= 0) {
      endpoint_.gid_index = static_cast<uint32_t>(i);
      endpoint_.gid = port->gids[static_cast<size_t>(i)];
    } else {
      EC_INFO(kNet, "verbs: %s port %u has no RoCE v2 GID for %s; using GID index %u",
              endpoint_.device.c_str(), endpoint_.port, ip.to_string().c_str(),
              endpoint_.gid_index);
    }
  }
  return Status::Ok();
}

Status VerbsTransport::open_device() {
  int count = 0;
  ibv_device** devices = api_->get_device_list(&count);
  for (int i = 0; devices != nullptr && i < count && core_->ctx == nullptr; ++i) {
    if (endpoint_.device == api_->get_device_name(devices[i])) {
      core_->ctx = api_->open_device(devices[i]);
    }
  }
  if (devices != nullptr) api_->free_device_list(devices);
  if (core_->ctx == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: cannot open %s: %s",
                       endpoint_.device.c_str(), errno_text().c_str());
  }
  // The LID as the opened port has it now (the listing's may be stale: a subnet manager sweep
  // can change it, and every emulated context is a port of its own).
  if (ibv_port_attr pa{}; api_->query_port(core_->ctx, endpoint_.port, &pa) == 0) {
    endpoint_.lid = pa.lid;
    if (pa.max_msg_sz != 0) max_message_ = pa.max_msg_sz;
  }
  // Async events (a QP or CQ in error, a port going down) are read without blocking by poll().
  if (!set_nonblocking(core_->ctx->async_fd)) {
    return make_status(StatusCode::kUnavailable, "verbs: async event fd: %s", errno_text().c_str());
  }
  core_->pd = api_->alloc_pd(core_->ctx);
  if (core_->pd == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_alloc_pd on %s: %s",
                       endpoint_.device.c_str(), errno_text().c_str());
  }
  channel_ = api_->create_comp_channel(core_->ctx);
  if (channel_ == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_create_comp_channel: %s",
                       errno_text().c_str());
  }
  if (!set_nonblocking(channel_->fd)) {
    return make_status(StatusCode::kUnavailable, "verbs: completion channel fd: %s",
                       errno_text().c_str());
  }
  const int cqe = std::max(1, size() - 1) * static_cast<int>(kReceiveWindow + kSendDepth) + 16;
  cq_ = api_->create_cq(core_->ctx, cqe, nullptr, channel_, 0);
  if (cq_ == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_create_cq(%d): %s", cqe,
                       errno_text().c_str());
  }
  wake_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) {
    return make_status(StatusCode::kUnavailable, "verbs: eventfd: %s", errno_text().c_str());
  }
  return Status::Ok();
}

Status VerbsTransport::create_queue_pair(int peer) {
  Peer& p = peers_[peer];
  if (p.qp != nullptr) return Status::Ok();
  ibv_qp_init_attr ia{};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = kSendDepth;
  ia.cap.max_recv_wr = kReceiveWindow;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = kWantInline;
  p.qp = api_->create_qp(core_->pd, &ia);
  if (p.qp == nullptr) {
    // Some devices cap inline data lower: ask again without it.
    ia.cap.max_inline_data = 0;
    p.qp = api_->create_qp(core_->pd, &ia);
  }
  if (p.qp == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_create_qp for rank %d: %s", peer,
                       errno_text().c_str());
  }
  p.inline_max = ia.cap.max_inline_data;  // what ibv_create_qp granted
  qp_to_peer_[p.qp->qp_num] = peer;
  ibv_qp_attr qa{};
  qa.qp_state = IBV_QPS_INIT;
  qa.pkey_index = 0;
  qa.port_num = endpoint_.port;
  qa.qp_access_flags = kQpAccess;
  if (api_->modify_qp(p.qp, &qa,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return make_status(StatusCode::kUnavailable, "verbs: QP for rank %d to INIT: %s", peer,
                       errno_text().c_str());
  }
  // Receives can be posted in INIT: the peer may send as soon as both sides are connected.
  for (uint32_t i = 0; i < kReceiveWindow; ++i) EC_RETURN_IF_ERROR(post_receive(peer));
  std::random_device entropy;
  p.psn = entropy() & kMaxPsn;
  return Status::Ok();
}

Status VerbsTransport::create_queue_pairs(QpAddress& a) {
  a.qps.resize(size());
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    EC_RETURN_IF_ERROR(create_queue_pair(peer));
    a.qps[peer] = {peers_[peer].qp->qp_num, peers_[peer].psn};
  }
  return Status::Ok();
}

Result<std::unique_ptr<RemoteRegion>> VerbsTransport::import_region(int peer,
                                                                    std::span<const uint8_t> key) {
  if (peer < 0 || peer >= size() || peer == rank() || !peers_[peer].known) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: import_region: rank %d is not a connected peer (connect() it "
                       "first)",
                       peer);
  }
  EC_ASSIGN_OR_RETURN(RegionKey k, decode_key(key, peer, peers_[peer].instance));
  if (k.kind == KeyKind::kCudaStaged) {
    return make_status(StatusCode::kNotSupported,
                       "verbs: rank %d's GPU buffer is staged through host memory there (no "
                       "GPUDirect RDMA on that host: see its info log), and writing into staged "
                       "GPU memory is not implemented; load nvidia_peermem or use a dma-buf "
                       "capable driver on that host",
                       peer);
  }
  return std::unique_ptr<RemoteRegion>(std::make_unique<VerbsRemote>(core_.get(), peer, k));
}

Status VerbsTransport::connect(int peer, std::span<const uint8_t> address) {
  if (peer < 0 || peer >= size()) {
    return make_status(StatusCode::kInvalidArgument, "verbs: connect: rank %d out of range", peer);
  }
  if (peer == rank()) return Status::Ok();  // writes to oneself are not a verbs path
  if (closed_) return Status(StatusCode::kAborted, "verbs: connect: transport closed");
  EC_ASSIGN_OR_RETURN(QpAddress a, decode_address(address, peer, size()));
  Peer& p = peers_[peer];
  if (p.known) {
    if (a.instance == p.address.instance) return Status::Ok();
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: rank %d is already connected to another instance", peer);
  }
  if (a.link != static_cast<uint8_t>(endpoint_.link) || a.use_gid != endpoint_.use_gid) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: rank %d uses a %s port%s, this rank a %s port%s: they cannot "
                       "connect (check EAGERCOMM_IB_HCA / _IB_GID_INDEX on both)",
                       peer, link_layer_name(static_cast<LinkLayer>(a.link)),
                       a.use_gid ? " with a GID" : "", link_layer_name(endpoint_.link),
                       endpoint_.use_gid ? " with a GID" : "");
  }
  if (a.use_gid && a.gid_roce_v2 != endpoint_.gid.roce_v2) {
    // RoCE v1 frames (Ethernet) and v2 packets (UDP/IP) do not reach each other's QPs.
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: rank %d uses a RoCE %s GID (index %u), this rank a RoCE %s GID "
                       "(index %u): they cannot connect (set EAGERCOMM_IB_GID_INDEX to entries "
                       "of the same type on both; show_gids lists them)",
                       peer, a.gid_roce_v2 ? "v2" : "v1", a.gid_index,
                       endpoint_.gid.roce_v2 ? "v2" : "v1", endpoint_.gid_index);
  }
  EC_ASSIGN_OR_RETURN(const ConnectPath path,
                      choose_connect_path(connect_mode_, offers_cm_, a.offers_cm, peer));
  if (p.conn) {  // the peer's cm request came first
    if (path != ConnectPath::kCm || a.instance != p.hello_instance) {
      return make_status(StatusCode::kProtocolError,
                         "verbs: rank %d's rdma_cm request does not match its address (another "
                         "instance, or it offers no rdma_cm)",
                         peer);
    }
  } else {
    p.conn = std::make_unique<Connection>(path, cm_wins_crossing(rank(), peer));
  }
  p.address = std::move(a);
  p.instance = p.address.instance;
  p.credit_addr = p.address.credit_addr;
  p.credit_rkey = p.address.credit_rkey;
  p.known = true;
  // The store path connects now; rdma_cm when either side first sends (connect_on_demand()).
  EC_DEBUG(kNet, "verbs: rank %d connects by %s", peer, connect_path_name(path));
  drive(peer, ConnEvent::kStart);
  // The store path completes here; a failure is an error of this call.
  if (path == ConnectPath::kStore && p.conn->state() == ConnState::kFailed) {
    return make_status(StatusCode::kUnavailable, "verbs: connecting to rank %d: %s", peer,
                       p.conn->error().c_str());
  }
  return Status::Ok();
}

Status VerbsTransport::modify_qp_from_store(int peer) {
  Peer& p = peers_[peer];
  const QpAddress& a = p.address;
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = mtu_enum(std::min(a.mtu, std::max(endpoint_.mtu, 256u)));
  rtr.dest_qp_num = a.qps[rank()].qpn;
  rtr.rq_psn = a.qps[rank()].psn;
  rtr.max_dest_rd_atomic = 1;
  rtr.ah_attr.dlid = a.lid;
  rtr.ah_attr.port_num = endpoint_.port;
  if (a.use_gid) {
    rtr.ah_attr.is_global = 1;
    std::memcpy(rtr.ah_attr.grh.dgid.raw, a.gid.data(), 16);
    rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(endpoint_.gid_index);
    rtr.ah_attr.grh.hop_limit = 64;
  }
  int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC;
  apply_qp_settings(qp_settings_, rtr, rtr_mask);
  if (api_->modify_qp(p.qp, &rtr, rtr_mask) != 0) {
    return make_status(StatusCode::kUnavailable, "QP to rank %d to RTR: %s", peer,
                       errno_text().c_str());
  }
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = p.psn;
  rts.max_rd_atomic = 1;
  int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  apply_qp_settings(qp_settings_, rts, rts_mask);
  if (api_->modify_qp(p.qp, &rts, rts_mask) != 0) {
    return make_status(StatusCode::kUnavailable, "QP to rank %d to RTS: %s", peer,
                       errno_text().c_str());
  }
  return Status::Ok();
}

}  // namespace verbs

Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportParams& params) {
  if (params.size < 1 || params.rank < 0 || params.rank >= params.size) {
    return make_status(StatusCode::kInvalidArgument, "verbs: rank %d of %d is not a rank",
                       params.rank, params.size);
  }
  const TransportConfig defaults;
  const TransportConfig& config = params.config != nullptr ? *params.config : defaults;
  const verbs::VerbsApi* api = nullptr;
  if (config.verbs_emulate) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      EC_WARN(kNet,
              "verbs: EAGERCOMM_VERBS_EMULATE=1: the verbs transport runs on the emulated "
              "RDMA device (shared memory on this host), not on a NIC");
    });
    api = &verbs::emulated_verbs_api();
  } else {
    EC_ASSIGN_OR_RETURN(api, verbs::system_verbs_api());
  }
  auto t = std::make_unique<verbs::VerbsTransport>(params.rank, params.size, *api);
  EC_RETURN_IF_ERROR(t->init(config));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace eagercomm
