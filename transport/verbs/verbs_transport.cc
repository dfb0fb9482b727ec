// The verbs backend (see verbs_transport.h for the protocol).
#include "transport/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <unordered_map>
#include <vector>

#include "runtime/log.h"
#include "runtime/unique_fd.h"
#include "transport/local_completions.h"
#include "transport/verbs/verbs_credits.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_wire.h"

namespace eagercomm {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kReceiveWindow = 64;  // receives posted per sender: its credits
constexpr uint32_t kSendDepth = 256;     // send work requests in flight per queue pair
constexpr uint32_t kWantInline = 64;     // bytes sent inline when the device allows
constexpr auto kNap = 1ms;               // longest sleep in wait() (see the header)
// wr_id of a work request: a slot index (a user write), or one of these bits with the peer.
constexpr uint64_t kCreditWrite = 1ull << 63;  // a credit update
constexpr uint64_t kReceive = 1ull << 62;      // a posted receive

std::string errno_text() { return std::strerror(errno); }

// The device context and protection domain: shared by the transport and its regions (a region
// may outlive the transport and must deregister before the domain goes).
struct Core {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ~Core() {
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class VerbsRegion final : public MemoryRegion {
 public:
  VerbsRegion(std::shared_ptr<Core> core, ibv_mr* mr, std::unique_ptr<void, FreeDeleter> owned,
              void* data, size_t size, std::vector<uint8_t> key)
      : MemoryRegion(data, size, MemoryKind::kHost),
        core_(std::move(core)),
        mr_(mr),
        owned_(std::move(owned)) {
    remote_key_ = std::move(key);
  }
  ~VerbsRegion() override { ibv_dereg_mr(mr_); }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  const Core* core() const { return core_.get(); }

 private:
  std::shared_ptr<Core> core_;
  ibv_mr* mr_;
  std::unique_ptr<void, FreeDeleter> owned_;
};

class VerbsRemote final : public RemoteRegion {
 public:
  VerbsRemote(const Core* core, int peer, const verbs::RegionKey& k)
      : RemoteRegion(peer, k.length), core_(core), addr_(k.addr), rkey_(k.rkey) {}
  const Core* core() const { return core_; }
  uint64_t addr() const { return addr_; }
  uint32_t rkey() const { return rkey_; }

 private:
  const Core* core_;
  uint64_t addr_;
  uint32_t rkey_;
};

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

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(int rank, int size) : Transport(rank, size) {}
  ~VerbsTransport() override { close(); }

  Status init(const Config& config);

  std::string_view name() const override { return "verbs"; }
  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind kind) override;
  Result<std::unique_ptr<RemoteRegion>> import_region(int peer,
                                                      std::span<const uint8_t> key) override;
  std::vector<uint8_t> local_address() const override { return address_; }
  Status connect(int peer, std::span<const uint8_t> address) override;
  Status write(const MemoryRegion& local, size_t local_offset, const RemoteRegion& remote,
               size_t remote_offset, size_t bytes, uint32_t tag, uint64_t cookie) override;
  Status notify(int peer, uint32_t tag) override;
  size_t poll(std::span<TransportCompletion> out) override;
  void wait(std::chrono::nanoseconds timeout) override;
  void wake() override;
  void close() override;

 private:
  struct Peer {
    ibv_qp* qp = nullptr;
    uint32_t psn = 0;  // our first send PSN on this QP
    bool connected = false;
    bool failed = false;
    uint64_t instance = 0;  // the peer transport's, from its address
    uint64_t credit_addr = 0;
    uint32_t credit_rkey = 0;
    uint32_t sends = 0;  // send work requests not completed yet
    verbs::SendCredits credits{kReceiveWindow};
    verbs::ReturnCredits returns{kReceiveWindow};
    bool credit_due = false;  // a credit update waits for send-queue room
  };
  struct SendSlot {
    int peer;
    uint32_t tag;
    uint64_t cookie;
  };

  Result<std::unique_ptr<MemoryRegion>> make_region(void* data, size_t bytes,
                                                    std::unique_ptr<void, FreeDeleter> owned);
  Status check_sendable(int peer, const char* what);
  Status post_write(int peer, uint64_t local_addr, uint32_t lkey, uint64_t remote_addr,
                    uint32_t rkey, size_t bytes, uint32_t tag, uint64_t cookie);
  Status post_receive(int peer);
  void post_credit(int peer);
  void fail_peer(int peer, const std::string& why);
  uint64_t credit_word(int peer) const;

  std::shared_ptr<Core> core_;
  verbs::Endpoint endpoint_;
  uint64_t instance_ = 0;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  UniqueFd wake_fd_;
  uint32_t inline_max_ = 0;
  std::vector<Peer> peers_;
  std::unordered_map<uint32_t, int> qp_to_peer_;
  std::unique_ptr<MemoryRegion> credit_in_;   // one word per sender: receives it posted for us
  std::unique_ptr<MemoryRegion> credit_out_;  // one word per peer: the source of our updates
  std::vector<uint8_t> address_;
  std::vector<SendSlot> slots_;
  std::vector<uint32_t> free_slots_;
  LocalCompletions errors_;  // peer errors found outside ibv_poll_cq (while posting)
  std::atomic<bool> woken_{false};
  bool closed_ = false;
};

Status VerbsTransport::init(const Config& config) {
  const verbs::DeviceList list = verbs::list_verbs_devices();
  EC_ASSIGN_OR_RETURN(endpoint_, verbs::choose_endpoint(list.devices, config, list.reason));
  core_ = std::make_shared<Core>();
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  for (int i = 0; devices != nullptr && i < count && core_->ctx == nullptr; ++i) {
    if (endpoint_.device == ibv_get_device_name(devices[i])) {
      core_->ctx = ibv_open_device(devices[i]);
    }
  }
  if (devices != nullptr) ibv_free_device_list(devices);
  if (core_->ctx == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: cannot open %s: %s",
                       endpoint_.device.c_str(), errno_text().c_str());
  }
  core_->pd = ibv_alloc_pd(core_->ctx);
  if (core_->pd == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_alloc_pd on %s: %s",
                       endpoint_.device.c_str(), errno_text().c_str());
  }
  channel_ = ibv_create_comp_channel(core_->ctx);
  if (channel_ == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_create_comp_channel: %s",
                       errno_text().c_str());
  }
  if (fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK) != 0) {
    return make_status(StatusCode::kUnavailable, "verbs: completion channel fd: %s",
                       errno_text().c_str());
  }
  const int cqe = std::max(1, size() - 1) * static_cast<int>(kReceiveWindow + kSendDepth) + 16;
  cq_ = ibv_create_cq(core_->ctx, cqe, nullptr, channel_, 0);
  if (cq_ == nullptr) {
    return make_status(StatusCode::kUnavailable, "verbs: ibv_create_cq(%d): %s", cqe,
                       errno_text().c_str());
  }
  wake_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) {
    return make_status(StatusCode::kUnavailable, "verbs: eventfd: %s", errno_text().c_str());
  }
  std::random_device entropy;
  instance_ = (uint64_t{entropy()} << 32) | entropy();
  EC_ASSIGN_OR_RETURN(credit_in_, allocate(static_cast<size_t>(size()) * 8, MemoryKind::kHost));
  EC_ASSIGN_OR_RETURN(credit_out_, allocate(static_cast<size_t>(size()) * 8, MemoryKind::kHost));
  peers_.resize(size());
  verbs::QpAddress a;
  a.rank = rank();
  a.instance = instance_;
  a.link = static_cast<uint8_t>(endpoint_.link);
  a.port = endpoint_.port;
  a.lid = endpoint_.lid;
  a.mtu = endpoint_.mtu >= 256 ? endpoint_.mtu : 1024;
  a.use_gid = endpoint_.use_gid;
  a.gid_index = static_cast<uint8_t>(endpoint_.gid_index);
  a.gid = endpoint_.gid.raw;
  a.credit_addr = reinterpret_cast<uintptr_t>(credit_in_->data());
  a.credit_rkey = static_cast<const VerbsRegion&>(*credit_in_).rkey();
  a.qps.resize(size());
  bool first_qp = true;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    ibv_qp_init_attr ia{};
    ia.send_cq = cq_;
    ia.recv_cq = cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = kSendDepth;
    ia.cap.max_recv_wr = kReceiveWindow;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = kWantInline;
    Peer& p = peers_[peer];
    p.qp = ibv_create_qp(core_->pd, &ia);
    if (p.qp == nullptr) {
      // Some devices cap inline data lower: ask again without it.
      ia.cap.max_inline_data = 0;
      p.qp = ibv_create_qp(core_->pd, &ia);
    }
    if (p.qp == nullptr) {
      return make_status(StatusCode::kUnavailable, "verbs: ibv_create_qp for rank %d: %s", peer,
                         errno_text().c_str());
    }
    // ibv_create_qp reports the inline size it granted: the smallest over the QPs is used.
    inline_max_ = first_qp ? ia.cap.max_inline_data : std::min(inline_max_, ia.cap.max_inline_data);
    first_qp = false;
    qp_to_peer_[p.qp->qp_num] = peer;
    ibv_qp_attr qa{};
    qa.qp_state = IBV_QPS_INIT;
    qa.pkey_index = 0;
    qa.port_num = endpoint_.port;
    qa.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(p.qp, &qa,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      return make_status(StatusCode::kUnavailable, "verbs: QP for rank %d to INIT: %s", peer,
                         errno_text().c_str());
    }
    // Receives can be posted in INIT: the peer may send as soon as both sides are connected.
    for (uint32_t i = 0; i < kReceiveWindow; ++i) EC_RETURN_IF_ERROR(post_receive(peer));
    p.psn = entropy() & verbs::kMaxPsn;
    a.qps[peer] = {p.qp->qp_num, p.psn};
  }
  address_ = verbs::encode_address(a);
  EC_INFO(kNet, "verbs: rank %d on %s port %u (%s)%s", rank(), endpoint_.device.c_str(),
          endpoint_.port, verbs::link_layer_name(endpoint_.link),
          endpoint_.use_gid ? (" GID " + endpoint_.gid.to_string()).c_str() : "");
  return Status::Ok();
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::make_region(
    void* data, size_t bytes, std::unique_ptr<void, FreeDeleter> owned) {
  ibv_mr* mr = ibv_reg_mr(core_->pd, data, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == nullptr) {
    return make_status(errno == ENOMEM ? StatusCode::kNoMemory : StatusCode::kIoError,
                       "verbs: registering %zu bytes at %p failed: %s (locked-memory limit? see "
                       "ulimit -l)",
                       bytes, data, errno_text().c_str());
  }
  verbs::RegionKey k;
  k.owner = rank();
  k.instance = instance_;
  k.addr = reinterpret_cast<uintptr_t>(data);
  k.length = bytes;
  k.rkey = mr->rkey;
  return std::unique_ptr<MemoryRegion>(std::make_unique<VerbsRegion>(
      core_, mr, std::move(owned), data, bytes, verbs::encode_key(k)));
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::allocate(size_t bytes, MemoryKind kind) {
  if (kind != MemoryKind::kHost) {
    return Status(StatusCode::kNotSupported,
                  "verbs: CUDA memory is not supported by this build yet (GPUDirect is issue #6)");
  }
  if (bytes == 0) return Status(StatusCode::kInvalidArgument, "verbs: allocate of 0 bytes");
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    return make_status(StatusCode::kNoMemory, "verbs: cannot allocate %zu bytes", bytes);
  }
  std::memset(p, 0, rounded);
  return make_region(p, bytes, std::unique_ptr<void, FreeDeleter>(p));
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::register_memory(void* data, size_t bytes,
                                                                      MemoryKind kind) {
  if (kind != MemoryKind::kHost) {
    return Status(StatusCode::kNotSupported,
                  "verbs: CUDA memory is not supported by this build yet (GPUDirect is issue #6)");
  }
  if (data == nullptr || bytes == 0) {
    return Status(StatusCode::kInvalidArgument, "verbs: register_memory of an empty range");
  }
  return make_region(data, bytes, nullptr);
}

Result<std::unique_ptr<RemoteRegion>> VerbsTransport::import_region(int peer,
                                                                    std::span<const uint8_t> key) {
  if (peer < 0 || peer >= size() || peer == rank() || !peers_[peer].connected) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: import_region: rank %d is not a connected peer", peer);
  }
  EC_ASSIGN_OR_RETURN(verbs::RegionKey k, verbs::decode_key(key, peer, peers_[peer].instance));
  if (k.kind != verbs::KeyKind::kHost) {
    return Status(StatusCode::kNotSupported, "verbs: a CUDA region of a peer (not supported yet)");
  }
  return std::unique_ptr<RemoteRegion>(std::make_unique<VerbsRemote>(core_.get(), peer, k));
}

Status VerbsTransport::connect(int peer, std::span<const uint8_t> address) {
  if (peer < 0 || peer >= size()) {
    return make_status(StatusCode::kInvalidArgument, "verbs: connect: rank %d out of range", peer);
  }
  if (peer == rank()) return Status::Ok();  // writes to oneself are not a verbs path
  EC_ASSIGN_OR_RETURN(verbs::QpAddress a, verbs::decode_address(address, peer, size()));
  Peer& p = peers_[peer];
  if (p.connected) {
    if (a.instance == p.instance) return Status::Ok();
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: rank %d is already connected to another instance", peer);
  }
  if (a.link != static_cast<uint8_t>(endpoint_.link) || a.use_gid != endpoint_.use_gid) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: rank %d uses a %s port%s, this rank a %s port%s: they cannot "
                       "connect (check EAGERCOMM_IB_HCA / _IB_GID_INDEX on both)",
                       peer, verbs::link_layer_name(static_cast<verbs::LinkLayer>(a.link)),
                       a.use_gid ? " with a GID" : "", verbs::link_layer_name(endpoint_.link),
                       endpoint_.use_gid ? " with a GID" : "");
  }
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = mtu_enum(std::min(a.mtu, std::max(endpoint_.mtu, 256u)));
  rtr.dest_qp_num = a.qps[rank()].qpn;
  rtr.rq_psn = a.qps[rank()].psn;
  rtr.max_dest_rd_atomic = 1;
  rtr.min_rnr_timer = 12;
  rtr.ah_attr.dlid = a.lid;
  rtr.ah_attr.port_num = endpoint_.port;
  if (a.use_gid) {
    rtr.ah_attr.is_global = 1;
    std::memcpy(rtr.ah_attr.grh.dgid.raw, a.gid.data(), 16);
    rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(endpoint_.gid_index);
    rtr.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(p.qp, &rtr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    return make_status(StatusCode::kUnavailable, "verbs: QP to rank %d to RTR: %s", peer,
                       errno_text().c_str());
  }
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try
  rts.retry_cnt = 7;  // then the send completes with IBV_WC_RETRY_EXC_ERR: the peer is gone
  rts.rnr_retry = 7;  // credits keep receivers ready; 7 (infinite) is the safety net
  rts.sq_psn = p.psn;
  rts.max_rd_atomic = 1;
  if (ibv_modify_qp(p.qp, &rts,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    return make_status(StatusCode::kUnavailable, "verbs: QP to rank %d to RTS: %s", peer,
                       errno_text().c_str());
  }
  p.instance = a.instance;
  p.credit_addr = a.credit_addr;
  p.credit_rkey = a.credit_rkey;
  p.connected = true;
  return Status::Ok();
}

Status VerbsTransport::check_sendable(int peer, const char* what) {
  if (closed_) return make_status(StatusCode::kAborted, "verbs: %s: transport closed", what);
  if (peer < 0 || peer >= size() || peer == rank()) {
    return make_status(StatusCode::kInvalidArgument, "verbs: %s: rank %d is not a peer", what,
                       peer);
  }
  const Peer& p = peers_[peer];
  if (!p.connected) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: %s: rank %d is not connected (connect() it first)", what, peer);
  }
  if (p.failed) {
    return make_status(StatusCode::kPeerFailed, "verbs: %s: the connection to rank %d failed", what,
                       peer);
  }
  return Status::Ok();
}

uint64_t VerbsTransport::credit_word(int peer) const {
  const auto* words = static_cast<const uint64_t*>(credit_in_->data());
  // Written by the NIC on the peer's behalf; atomic so the compiler reads it every time.
  return __atomic_load_n(&words[peer], __ATOMIC_ACQUIRE);
}

Status VerbsTransport::post_write(int peer, uint64_t local_addr, uint32_t lkey,
                                  uint64_t remote_addr, uint32_t rkey, size_t bytes, uint32_t tag,
                                  uint64_t cookie) {
  Peer& p = peers_[peer];
  // The word is 0 until the peer's first update.
  if (const uint64_t word = p.credits.can_send() ? 0 : credit_word(peer);
      word != 0 && !p.credits.update(word)) {
    fail_peer(peer, "its credit count is impossible (corrupt or hostile peer)");
    return make_status(StatusCode::kProtocolError, "verbs: rank %d sent an impossible credit count",
                       peer);
  }
  if (!p.credits.can_send() || p.sends + 1 >= kSendDepth) return Status(StatusCode::kBusy, {});
  uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back({});
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  slots_[slot] = SendSlot{peer, tag, cookie};
  ibv_sge sge{local_addr, static_cast<uint32_t>(bytes), lkey};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = bytes > 0 ? &sge : nullptr;
  wr.num_sge = bytes > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | (bytes > 0 && bytes <= inline_max_ ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(tag);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(p.qp, &wr, &bad); e != 0) {
    free_slots_.push_back(slot);
    if (e == ENOMEM) return Status(StatusCode::kBusy, {});
    fail_peer(peer, std::string("ibv_post_send: ") + std::strerror(e));
    return make_status(StatusCode::kPeerFailed, "verbs: posting a write to rank %d: %s", peer,
                       std::strerror(e));
  }
  p.credits.on_sent();
  ++p.sends;
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
  if (local_offset > local.size() || bytes > local.size() - local_offset ||
      remote_offset > remote.size() || bytes > remote.size() - remote_offset ||
      bytes > UINT32_MAX) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: write of %zu bytes out of bounds (local %zu+%zu of %zu, remote "
                       "%zu+%zu of %zu)",
                       bytes, local_offset, bytes, local.size(), remote_offset, bytes,
                       remote.size());
  }
  EC_RETURN_IF_ERROR(check_sendable(remote.peer(), "write"));
  return post_write(remote.peer(), reinterpret_cast<uintptr_t>(local.data()) + local_offset,
                    src->lkey(), dst->addr() + remote_offset, dst->rkey(), bytes, tag, cookie);
}

Status VerbsTransport::notify(int peer, uint32_t tag) {
  EC_RETURN_IF_ERROR(check_sendable(peer, "notify"));
  const Peer& p = peers_[peer];
  // Zero bytes: the address and key are not used, but must be some valid pair.
  return post_write(peer, 0, 0, p.credit_addr, p.credit_rkey, 0, tag, 0);
}

Status VerbsTransport::post_receive(int peer) {
  ibv_recv_wr wr{};
  wr.wr_id = kReceive | static_cast<uint64_t>(peer);
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
  if (p.sends + 1 >= kSendDepth) {
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
  ibv_send_wr wr{};
  wr.wr_id = kCreditWrite | static_cast<uint64_t>(peer);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;  // no immediate: consumes no receive at the peer
  wr.send_flags = IBV_SEND_SIGNALED | (inline_max_ >= sizeof(uint64_t) ? IBV_SEND_INLINE : 0);
  wr.wr.rdma.remote_addr = p.credit_addr + static_cast<uint64_t>(rank()) * 8;
  wr.wr.rdma.rkey = p.credit_rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(p.qp, &wr, &bad); e != 0) {
    p.credit_due = true;
    return;
  }
  p.returns.publish();
  p.credit_due = false;
  ++p.sends;
}

void VerbsTransport::fail_peer(int peer, const std::string& why) {
  Peer& p = peers_[peer];
  if (p.failed) return;
  p.failed = true;
  EC_ERROR(kNet, "verbs: rank %d lost rank %d: %s", rank(), peer, why.c_str());
  errors_.push(TransportCompletion::Kind::kPeerError, peer, 0, 0);
}

size_t VerbsTransport::poll(std::span<TransportCompletion> out) {
  if (closed_) return 0;
  // Peer errors found earlier first.
  size_t n = errors_.drain(out);
  ibv_wc wc[32];
  while (n < out.size()) {
    const int want = static_cast<int>(std::min<size_t>(32, out.size() - n));
    const int got = ibv_poll_cq(cq_, want, wc);
    if (got <= 0) break;
    for (int i = 0; i < got; ++i) {
      const ibv_wc& w = wc[i];
      const auto qp = qp_to_peer_.find(w.qp_num);
      if (qp == qp_to_peer_.end()) continue;  // a QP of ours always maps; defensive
      const int peer = qp->second;
      Peer& p = peers_[peer];
      // Classified by wr_id: an error completion's opcode is undefined.
      if (w.wr_id & kReceive) {
        if (w.status != IBV_WC_SUCCESS) {
          if (w.status != IBV_WC_WR_FLUSH_ERR) fail_peer(peer, ibv_wc_status_str(w.status));
          continue;
        }
        if (w.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(w.wc_flags & IBV_WC_WITH_IMM)) {
          fail_peer(peer, "a receive completion without an immediate (not an eagercomm peer?)");
          continue;
        }
        if (!post_receive(peer).ok()) {
          fail_peer(peer, "cannot post a receive again");
        } else {
          p.returns.on_reposted();
          if (p.returns.due()) post_credit(peer);
        }
        out[n++] =
            TransportCompletion{TransportCompletion::Kind::kNotify, peer, ntohl(w.imm_data), 0};
        continue;
      }
      // A send completion: a user write, or a credit update.
      if (p.sends > 0) --p.sends;
      if (w.wr_id & kCreditWrite) {
        if (w.status != IBV_WC_SUCCESS && w.status != IBV_WC_WR_FLUSH_ERR) {
          fail_peer(peer, ibv_wc_status_str(w.status));
        }
        continue;
      }
      if (w.wr_id >= slots_.size()) continue;  // ours are always in range; defensive
      const SendSlot s = slots_[w.wr_id];
      free_slots_.push_back(static_cast<uint32_t>(w.wr_id));
      if (w.status != IBV_WC_SUCCESS) {
        if (w.status != IBV_WC_WR_FLUSH_ERR) fail_peer(peer, ibv_wc_status_str(w.status));
        continue;
      }
      out[n++] =
          TransportCompletion{TransportCompletion::Kind::kWriteDone, s.peer, s.tag, s.cookie};
    }
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peers_[peer].credit_due && !peers_[peer].failed) post_credit(peer);
  }
  return n + errors_.drain(out.subspan(n));  // errors found in this poll
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
  pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
  timespec ts{0, static_cast<long>(limit.count())};
  if (::ppoll(fds, 2, &ts, nullptr) > 0) {
    if (fds[0].revents & POLLIN) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
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

void VerbsTransport::close() {
  if (closed_) return;
  closed_ = true;
  for (Peer& p : peers_) {
    if (p.qp != nullptr) ibv_destroy_qp(p.qp);
    p.qp = nullptr;
  }
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  cq_ = nullptr;
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  channel_ = nullptr;
  credit_in_.reset();  // regions held by users keep the device context alive themselves
  credit_out_.reset();
}

}  // namespace

Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportParams& params) {
  if (params.size < 1 || params.rank < 0 || params.rank >= params.size) {
    return make_status(StatusCode::kInvalidArgument, "verbs: rank %d of %d is not a rank",
                       params.rank, params.size);
  }
  const Config defaults;
  auto t = std::make_unique<VerbsTransport>(params.rank, params.size);
  EC_RETURN_IF_ERROR(t->init(params.config != nullptr ? *params.config : defaults));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace eagercomm
