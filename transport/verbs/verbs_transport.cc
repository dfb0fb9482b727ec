// The verbs backend (see verbs_transport.h for the protocol).
#include "transport/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/gpu.h"
#include "runtime/unique_fd.h"
#include "transport/local_completions.h"
#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_verbs.h"
#include "transport/verbs/gpudirect.h"
#include "transport/verbs/verbs_api.h"
#include "transport/verbs/verbs_cm_address.h"
#include "transport/verbs/verbs_connect.h"
#include "transport/verbs/verbs_credits.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_qp_settings.h"
#include "transport/verbs/verbs_wire.h"
#include "transport/write_bounds.h"

namespace eagercomm {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kReceiveWindow = 64;  // receives posted per sender: its credits
constexpr uint32_t kSendDepth = 256;     // send work requests in flight per queue pair
constexpr uint32_t kWantInline = 64;     // bytes sent inline when the device allows
constexpr auto kNap = 1ms;               // longest sleep in wait() (see the header)
constexpr int kCmTimeoutMs = 2000;       // rdma_resolve_addr / _route
constexpr int kCmBacklog = 1024;         // pending connect requests on the listener
constexpr auto kCloseDrain = 2s;         // close(): longest wait for posted sends to execute
constexpr uint32_t kAsyncEvery = 1024;   // poll() calls between reads of the async events
// A credit update asks for a completion once per this many send requests: nobody waits for it,
// and each completion costs the NIC a DMA and poll() a read. A write() always asks (it owes its
// caller a kWriteDone with its cookie), and so does a notify(): close() must see the last ones
// (exit notices) executed, and a fence posted at close() to learn that would wait out the
// retries of a peer that closed first (the usual shutdown order).
constexpr uint32_t kSignalEvery = 32;
static_assert(kSignalEvery < kSendDepth / 2, "unsignaled requests must not fill the send queue");
// wr_id of a work request: a slot index (a write()), or one of these bits with the peer in
// bits 0..31. A control request (a notify() or a credit update) carries in bits
// 32..47 how many send requests its completion retires: a completion also retires the
// unsignaled requests posted before it on that QP (they executed first: RC order).
constexpr uint64_t kControl = 1ull << 63;
constexpr uint64_t kReceive = 1ull << 62;  // a posted receive
uint64_t control_wr_id(int peer, uint32_t retires) {
  return kControl | (static_cast<uint64_t>(retires & 0xffff) << 32) | static_cast<uint32_t>(peer);
}

std::string errno_text() { return std::strerror(errno); }

// The device context and protection domain: shared by the transport and its regions (a region
// may outlive the transport and must deregister before the domain goes).
struct Core {
  explicit Core(const verbs::VerbsApi& functions) : api(functions) {}
  const verbs::VerbsApi& api;  // the process's rdma-core (or the emulated device): outlives us
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ~Core() {
    if (pd != nullptr) api.dealloc_pd(pd);
    if (ctx != nullptr) api.close_device(ctx);
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Memory behind a region: host memory (owned or the caller's), GPU memory the NIC reaches
// directly, or GPU memory with a pinned host copy the NIC reaches instead (staging).
struct RegionMemory {
  std::unique_ptr<void, FreeDeleter> host;   // allocate() of host memory
  std::optional<gpu::DeviceBuffer> device;   // allocate() of GPU memory
  std::optional<gpu::PinnedBuffer> staging;  // what the NIC reads and writes when staged
};

class VerbsRegion final : public MemoryRegion {
 public:
  VerbsRegion(std::shared_ptr<Core> core, ibv_mr* mr, RegionMemory memory, void* data, size_t size,
              MemoryKind kind, std::vector<uint8_t> key)
      : MemoryRegion(data, size, kind),
        core_(std::move(core)),
        mr_(mr),
        memory_(std::move(memory)) {
    remote_key_ = std::move(key);
  }
  ~VerbsRegion() override { core_->api.dereg_mr(mr_); }  // before the memory members go
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  const Core* core() const { return core_.get(); }
  // Where the NIC reads this region's bytes: the staging copy when there is one.
  uint64_t nic_address() const {
    return reinterpret_cast<uintptr_t>(memory_.staging ? memory_.staging->data() : data());
  }
  bool staged() const { return memory_.staging.has_value(); }

 private:
  std::shared_ptr<Core> core_;
  ibv_mr* mr_;
  RegionMemory memory_;
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
  VerbsTransport(int rank, int size, const verbs::VerbsApi& api)
      : Transport(rank, size), core_(std::make_shared<Core>(api)), api_(&core_->api) {}
  ~VerbsTransport() override { close(); }

  Status init(const TransportConfig& config);

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
  // A peer that disconnected after connecting (its close(), over the cm path; a dead peer fails
  // instead).
  bool peer_left(int peer) const override {
    return peer >= 0 && peer < size() && peers_[peer].left && !peers_[peer].failed;
  }
  Status peer_error(int peer) const override {
    if (peer >= 0 && peer < size() && !peers_[peer].failed_why.empty()) {
      return make_status(StatusCode::kPeerFailed, "verbs: %s", peers_[peer].failed_why.c_str());
    }
    return Transport::peer_error(peer);
  }

 private:
  struct Peer {
    ibv_qp* qp = nullptr;
    uint32_t psn = 0;                         // our first send PSN on this QP
    std::unique_ptr<verbs::Connection> conn;  // made by connect(), or by the peer's cm request
    rdma_cm_id* id = nullptr;                 // the cm path's id for this pair
    verbs::QpAddress address;                 // the peer's, from connect()
    uint64_t hello_instance = 0;              // from a cm request that came before connect()
    bool connected = false;                   // the QP is in RTS
    bool failed = false;
    std::string failed_why;  // the cause fail_peer() was given (peer_error)
    uint64_t instance = 0;   // the peer transport's, from its address
    uint64_t credit_addr = 0;
    uint32_t credit_rkey = 0;
    uint32_t sends = 0;       // send work requests not completed yet
    uint32_t unsignaled = 0;  // of those, the credit updates after the last signaled one
    verbs::SendCredits credits{kReceiveWindow};
    verbs::ReturnCredits returns{kReceiveWindow};
    bool credit_due = false;                // a credit update waits for send-queue room
    std::optional<std::string> disconnect;  // RDMA_CM_EVENT_DISCONNECTED seen, not acted on
    bool left = false;                      // it disconnected after connecting: closed
  };
  // A write() in flight. A notify() has none: its completion is not a kWriteDone (defect 6).
  struct SendSlot {
    int peer;
    uint32_t tag;
    uint64_t cookie;
    uint32_t retires;  // send requests its completion retires (itself and unsignaled ones)
  };
  // Whether the next send request to a peer asks for a completion, and what that retires.
  struct Signal {
    bool signaled;
    uint32_t retires;
  };
  static Signal next_signal(const Peer& p, bool owes_completion) {
    if (owes_completion || p.unsignaled + 1 >= kSignalEvery) return {true, p.unsignaled + 1};
    return {false, 1};  // seen only as an error or flush completion: the peer fails then
  }
  static void on_posted(Peer& p, Signal signal) {
    ++p.sends;
    p.unsignaled = signal.signaled ? 0 : p.unsignaled + 1;
  }
  // How many send requests a send completion retires.
  uint32_t retired_by(const ibv_wc& w) const {
    if (w.wr_id & kControl) return static_cast<uint32_t>(w.wr_id >> 32) & 0xffff;
    return w.wr_id < slots_.size() ? slots_[w.wr_id].retires : 1;
  }
  static void retire(Peer& p, uint32_t n) { p.sends -= std::min(p.sends, n); }
  // What post_write() is posting: a write() of host memory, of memory the CPU may not read
  // (GPU memory the NIC reaches directly: never inline, which the CPU would copy: defect 1),
  // or a notify().
  enum class Post { kHostWrite, kDeviceWrite, kNotify };

  // Host memory, or (kCuda) the emulated device's memory.
  Result<std::unique_ptr<MemoryRegion>> make_region(void* data, size_t bytes, RegionMemory memory,
                                                    MemoryKind kind = MemoryKind::kHost);
  Result<std::unique_ptr<MemoryRegion>> make_cuda_region(void* data, size_t bytes,
                                                         RegionMemory memory);
  Status check_sendable(int peer, const char* what);
  // Looks at the GPU owning `data` once: whether NIC writes into it need the flush (defect 4).
  Status note_gpudirect_device(const void* data);
  bool started(int peer) const { return peers_[peer].conn && peers_[peer].conn->started(); }
  Status setup_cm(const TransportConfig& config, const verbs::CmAddress& ip);
  // Feeds `e` to the peer's connection and performs what it asks (verbs_connect.h).
  void drive(int peer, verbs::ConnEvent e, const std::string& detail = {},
             rdma_cm_id* request = nullptr);
  Status perform(int peer, verbs::ConnAction a, rdma_cm_id* request);
  Status modify_qp_from_store(int peer);
  Status modify_qp_from_cm(int peer);
  rdma_conn_param conn_param(int peer, std::vector<uint8_t>& hello) const;
  void progress_cm();
  void on_connect_request(rdma_cm_id* id, std::span<const uint8_t> data);
  Status post_write(int peer, uint64_t local_addr, uint32_t lkey, uint64_t remote_addr,
                    uint32_t rkey, size_t bytes, uint32_t tag, uint64_t cookie, Post what);
  Status post_receive(int peer);
  void post_credit(int peer);
  void fail_peer(int peer, const std::string& why);
  void fail_all(const std::string& why);
  std::string completion_error(ibv_wc_status status) const;
  std::string retry_window() const;  // how long a write retries before its peer is lost
  void read_async_events();
  void drain_sends();
  uint64_t credit_word(int peer) const;

  std::shared_ptr<Core> core_;
  const verbs::VerbsApi* const api_;  // core_->api, the table every call goes through
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
  // The cm path: one event channel (non-blocking) and the listener on this device's IP.
  IbConnectMode connect_mode_ = IbConnectMode::kAuto;
  bool offers_cm_ = false;
  sockaddr_storage cm_source_{};  // our IP, port 0: where active ids resolve from
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  std::vector<SendSlot> slots_;
  std::vector<uint32_t> free_slots_;
  LocalCompletions errors_;  // peer errors found outside ibv_poll_cq (while posting)
  verbs::QpSettings qp_settings_;
  uint32_t max_message_ = UINT32_MAX;       // the port's max_msg_sz
  uint32_t polls_since_async_ = 0;          // poll() calls since it last read the async events
  std::atomic<bool> async_pending_{false};  // wait() saw the async fd readable
  // GPUDirect (gpudirect.h): probed at the first GPU registration; methods that failed here.
  std::optional<verbs::GpuDirectProbe> gpu_probe_;
  std::vector<verbs::GpuDirectFailure> gpu_failures_;
  std::optional<verbs::GpuDirectMethod> gpu_logged_;  // the method whose line was logged
  // GPUs whose memory was registered for the NIC to write into and that need the GPUDirect
  // flush before a notification (defect 4: per owning device, as its attributes say).
  std::vector<int> flush_devices_;
  std::vector<int> gpu_devices_seen_;  // whose attributes were looked at (and logged)
  std::atomic<bool> woken_{false};
  bool closed_ = false;
};

Status VerbsTransport::init(const TransportConfig& config) {
  // Before this process registers anything through the table (defect 7).
  if (const verbs::ForkProtectionResult fork = verbs::enable_fork_protection(*api_);
      fork.state == verbs::ForkProtection::kFailed) {
    static std::once_flag warned;
    std::call_once(warned,
                   [&] { EC_WARN(kNet, "verbs: no fork protection: %s", fork.why.c_str()); });
  }
  qp_settings_ = verbs::qp_settings(config);
  const verbs::DeviceList list = verbs::list_verbs_devices(*api_);
  // No GPU is known here (a transport serves host and GPU buffers alike): the NUMA node decides,
  // and the local rank spreads a host's ranks over equally near NICs.
  verbs::Locality here;
  here.numa_node = verbs::current_numa_node();
  EC_ASSIGN_OR_RETURN(endpoint_, verbs::choose_endpoint(list.devices, config, list.reason, here));
  // The IP rdma_cm would use (listened on, and on RoCE the address whose GID the port uses).
  verbs::CmAddress ip;
  if (config.ib_connect != IbConnectMode::kStore ||
      (endpoint_.link == verbs::LinkLayer::kEthernet &&
       config.ib_gid_index == TransportConfig::kAutoIndex)) {
    ip = verbs::find_cm_address(*api_, endpoint_.device, endpoint_.port);
  }
  if (endpoint_.link == verbs::LinkLayer::kEthernet &&
      config.ib_gid_index == TransportConfig::kAutoIndex && ip.found) {
    // Defect 8: the GID of that IP, not the port's first IPv4 one (maybe another VLAN's).
    const verbs::PortInfo* port = verbs::find_port(list.devices, endpoint_);
    if (const int i = port != nullptr ? verbs::roce_gid_of_ip(*port, ip.family, ip.ip) : -1;
        i >= 0) {
      endpoint_.gid_index = static_cast<uint32_t>(i);
      endpoint_.gid = port->gids[static_cast<size_t>(i)];
    } else {
      EC_INFO(kNet, "verbs: %s port %u has no RoCE v2 GID for %s; using GID index %u",
              endpoint_.device.c_str(), endpoint_.port, ip.to_string().c_str(),
              endpoint_.gid_index);
    }
  }
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
  if (fcntl(core_->ctx->async_fd, F_SETFL, fcntl(core_->ctx->async_fd, F_GETFL) | O_NONBLOCK) !=
      0) {
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
  if (fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK) != 0) {
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
  a.gid_roce_v2 = endpoint_.gid.roce_v2;
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
    // ibv_create_qp reports the inline size it granted: the smallest over the QPs is used.
    inline_max_ = first_qp ? ia.cap.max_inline_data : std::min(inline_max_, ia.cap.max_inline_data);
    first_qp = false;
    qp_to_peer_[p.qp->qp_num] = peer;
    ibv_qp_attr qa{};
    qa.qp_state = IBV_QPS_INIT;
    qa.pkey_index = 0;
    qa.port_num = endpoint_.port;
    qa.qp_access_flags = verbs::kQpAccess;
    if (api_->modify_qp(
            p.qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      return make_status(StatusCode::kUnavailable, "verbs: QP for rank %d to INIT: %s", peer,
                         errno_text().c_str());
    }
    // Receives can be posted in INIT: the peer may send as soon as both sides are connected.
    for (uint32_t i = 0; i < kReceiveWindow; ++i) EC_RETURN_IF_ERROR(post_receive(peer));
    p.psn = entropy() & verbs::kMaxPsn;
    a.qps[peer] = {p.qp->qp_num, p.psn};
  }
  EC_RETURN_IF_ERROR(setup_cm(config, ip));
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
  address_ = verbs::encode_address(a);
  EC_INFO(kNet, "verbs: rank %d on %s port %u (%s)%s; connects by %s", rank(),
          endpoint_.device.c_str(), endpoint_.port, verbs::link_layer_name(endpoint_.link),
          endpoint_.use_gid ? (" GID " + endpoint_.gid.to_string()).c_str() : "",
          offers_cm_ ? "rdma_cm where the peer offers it, else the store" : "the store");
  return Status::Ok();
}

Status VerbsTransport::setup_cm(const TransportConfig& config, const verbs::CmAddress& ip) {
  connect_mode_ = config.ib_connect;
  if (connect_mode_ == IbConnectMode::kStore) return Status::Ok();
  EC_ASSIGN_OR_RETURN(const bool offer, verbs::offers_cm(connect_mode_, ip.found, ip.why_none));
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
  EC_INFO(kNet, "verbs: rank %d listens for rdma_cm on %s port %u", rank(), ip.to_string().c_str(),
          ntohs(api_->get_src_port(listen_id_)));
  return Status::Ok();
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::make_region(void* data, size_t bytes,
                                                                  RegionMemory memory,
                                                                  MemoryKind kind) {
  ibv_mr* mr = api_->reg_mr(core_->pd, data, bytes, verbs::kQpAccess);
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
  if (kind == MemoryKind::kCuda) k.kind = verbs::KeyKind::kCuda;
  return std::unique_ptr<MemoryRegion>(std::make_unique<VerbsRegion>(
      core_, mr, std::move(memory), data, bytes, kind, verbs::encode_key(k)));
}

// GPU memory (issue #6, GPUDirect RDMA): dma-buf first, then ibv_reg_mr through the peer-memory
// module, then staging through pinned host memory. The choice is gpudirect.h's; a method that
// fails here is not tried again, and the method in use is logged once at info level whenever it
// changes (never a silent fallback).
Result<std::unique_ptr<MemoryRegion>> VerbsTransport::make_cuda_region(void* data, size_t bytes,
                                                                       RegionMemory memory) {
  if (!gpu_probe_) {
    gpu_probe_ = verbs::probe_gpudirect();
    gpu_probe_->rdma_device = true;                             // this transport has one open
    gpu_probe_->verbs_dmabuf = api_->reg_dmabuf_mr != nullptr;  // rdma-core 34+
  }
  constexpr int kAccess = verbs::kQpAccess;
  for (;;) {
    const verbs::GpuDirectChoice choice = verbs::choose_gpudirect(*gpu_probe_, gpu_failures_);
    if (!gpu_probe_->gpu) {
      return make_status(StatusCode::kUnavailable, "verbs: GPU memory without a GPU: %s",
                         choice.why.c_str());
    }
    if (gpu_logged_ != choice.method) {
      EC_INFO(kNet, "%s", verbs::gpudirect_log_line(choice).c_str());
      gpu_logged_ = choice.method;
    }
    ibv_mr* mr = nullptr;
    verbs::KeyKind kind = verbs::KeyKind::kCuda;
    void* nic = data;
    switch (choice.method) {
      case verbs::GpuDirectMethod::kDmaBuf: {
        auto buf = gpu::export_dmabuf(data, bytes);
        if (!buf.ok()) {
          gpu_failures_.push_back({choice.method, std::string(buf.status().message())});
          continue;
        }
        // The MR keeps its own reference to the dma-buf: the fd closes when `buf` goes.
        mr = api_->reg_dmabuf_mr(core_->pd, buf.value().offset, bytes,
                                 reinterpret_cast<uintptr_t>(data), buf.value().fd.get(), kAccess);
        if (mr == nullptr) {
          gpu_failures_.push_back({choice.method, "ibv_reg_dmabuf_mr: " + errno_text()});
          continue;
        }
        break;
      }
      case verbs::GpuDirectMethod::kPeerMemory:
        mr = api_->reg_mr(core_->pd, data, bytes, kAccess);
        if (mr == nullptr) {
          gpu_failures_.push_back({choice.method, "ibv_reg_mr: " + errno_text()});
          continue;
        }
        break;
      case verbs::GpuDirectMethod::kStaging: {
        EC_ASSIGN_OR_RETURN(gpu::PinnedBuffer pinned, gpu::PinnedBuffer::allocate(bytes));
        nic = pinned.data();
        mr = api_->reg_mr(core_->pd, nic, bytes, kAccess);
        if (mr == nullptr) {
          return make_status(StatusCode::kIoError,
                             "verbs: registering the %zu-byte pinned staging copy of GPU memory "
                             "failed: %s",
                             bytes, errno_text().c_str());
        }
        memory.staging = std::move(pinned);
        kind = verbs::KeyKind::kCudaStaged;
        break;
      }
    }
    if (kind == verbs::KeyKind::kCuda) {
      if (Status s = note_gpudirect_device(data); !s.ok()) {
        api_->dereg_mr(mr);
        return s;
      }
    }
    verbs::RegionKey k;
    k.owner = rank();
    k.instance = instance_;
    k.addr = reinterpret_cast<uintptr_t>(nic);
    k.length = bytes;
    k.rkey = mr->rkey;
    k.kind = kind;
    return std::unique_ptr<MemoryRegion>(std::make_unique<VerbsRegion>(
        core_, mr, std::move(memory), data, bytes, MemoryKind::kCuda, verbs::encode_key(k)));
  }
}

Status VerbsTransport::note_gpudirect_device(const void* data) {
  EC_ASSIGN_OR_RETURN(const int device, gpu::device_of(data));
  if (std::find(gpu_devices_seen_.begin(), gpu_devices_seen_.end(), device) !=
      gpu_devices_seen_.end()) {
    return Status::Ok();
  }
  gpu_devices_seen_.push_back(device);
  EC_ASSIGN_OR_RETURN(const gpu::RdmaWriteCaps caps, gpu::rdma_write_caps(device));
  const verbs::GpuDirectFlushChoice choice =
      verbs::choose_gpudirect_flush(caps.ordering, caps.flush_options);
  switch (choice.action) {
    case verbs::GpuDirectFlush::kNotNeeded:
      EC_INFO(kNet, "verbs: GPU %d: no GPUDirect flush: %s", device, choice.why.c_str());
      break;
    case verbs::GpuDirectFlush::kFlush:
      EC_INFO(kNet, "verbs: GPU %d: %s", device, choice.why.c_str());
      flush_devices_.push_back(device);
      break;
    case verbs::GpuDirectFlush::kUnsupported:
      EC_WARN(kNet, "verbs: GPU %d: %s", device, choice.why.c_str());
      break;
  }
  return Status::Ok();
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::allocate(size_t bytes, MemoryKind kind) {
  if (bytes == 0) return Status(StatusCode::kInvalidArgument, "verbs: allocate of 0 bytes");
  if (kind == MemoryKind::kCuda) {
    EC_ASSIGN_OR_RETURN(gpu::DeviceBuffer buffer, gpu::DeviceBuffer::allocate(bytes));
    EC_RETURN_IF_ERROR(gpu::zero(buffer.data(), bytes));
    void* data = buffer.data();
    RegionMemory memory;
    memory.device = std::move(buffer);
    return make_cuda_region(data, bytes, std::move(memory));
  }
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    return make_status(StatusCode::kNoMemory, "verbs: cannot allocate %zu bytes", bytes);
  }
  std::memset(p, 0, rounded);
  RegionMemory memory;
  memory.host.reset(p);
  return make_region(p, bytes, std::move(memory));
}

Result<std::unique_ptr<MemoryRegion>> VerbsTransport::register_memory(void* data, size_t bytes,
                                                                      MemoryKind kind) {
  if (data == nullptr || bytes == 0) {
    return Status(StatusCode::kInvalidArgument, "verbs: register_memory of an empty range");
  }
  // A device pointer passed as host memory (or the reverse) would fault in the NIC's driver or
  // register the wrong pages: refused with the buffer named.
  if (api_->is_device_memory != nullptr && api_->is_device_memory(data, bytes)) {
    // The emulated device's memory, which the CPU cannot read: what GPU memory registered for
    // GPUDirect is to a NIC (there is no GPU to flush).
    if (kind != MemoryKind::kCuda) {
      return Status(StatusCode::kInvalidArgument,
                    "verbs: register_memory: the emulated device's memory registered as host "
                    "memory (it is device memory: MemoryKind::kCuda)");
    }
    return make_region(data, bytes, {}, MemoryKind::kCuda);
  }
  EC_RETURN_IF_ERROR(gpu::check_buffer_kind(data, kind, "verbs: register_memory"));
  if (kind == MemoryKind::kCuda) return make_cuda_region(data, bytes, {});
  return make_region(data, bytes, {});
}

Result<std::unique_ptr<RemoteRegion>> VerbsTransport::import_region(int peer,
                                                                    std::span<const uint8_t> key) {
  if (peer < 0 || peer >= size() || peer == rank() || !started(peer)) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: import_region: rank %d is not a connected peer (connect() it "
                       "first)",
                       peer);
  }
  EC_ASSIGN_OR_RETURN(verbs::RegionKey k, verbs::decode_key(key, peer, peers_[peer].instance));
  if (k.kind == verbs::KeyKind::kCudaStaged) {
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
  EC_ASSIGN_OR_RETURN(verbs::QpAddress a, verbs::decode_address(address, peer, size()));
  Peer& p = peers_[peer];
  if (started(peer)) {
    if (a.instance == p.address.instance) return Status::Ok();
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
  if (a.use_gid && a.gid_roce_v2 != endpoint_.gid.roce_v2) {
    // RoCE v1 frames (Ethernet) and v2 packets (UDP/IP) do not reach each other's QPs.
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: rank %d uses a RoCE %s GID (index %u), this rank a RoCE %s GID "
                       "(index %u): they cannot connect (set EAGERCOMM_IB_GID_INDEX to entries "
                       "of the same type on both; show_gids lists them)",
                       peer, a.gid_roce_v2 ? "v2" : "v1", a.gid_index,
                       endpoint_.gid.roce_v2 ? "v2" : "v1", endpoint_.gid_index);
  }
  EC_ASSIGN_OR_RETURN(const verbs::ConnectPath path,
                      verbs::choose_connect_path(connect_mode_, offers_cm_, a.offers_cm, peer));
  if (p.conn) {  // the peer's cm request came first
    if (path != verbs::ConnectPath::kCm || a.instance != p.hello_instance) {
      return make_status(StatusCode::kProtocolError,
                         "verbs: rank %d's rdma_cm request does not match its address (another "
                         "instance, or it offers no rdma_cm)",
                         peer);
    }
  } else {
    p.conn = std::make_unique<verbs::Connection>(path, verbs::cm_active(rank(), peer));
  }
  p.address = std::move(a);
  p.instance = p.address.instance;
  p.credit_addr = p.address.credit_addr;
  p.credit_rkey = p.address.credit_rkey;
  EC_DEBUG(kNet, "verbs: rank %d connects to rank %d by %s", rank(), peer,
           verbs::connect_path_name(path));
  drive(peer, verbs::ConnEvent::kStart);
  // The store path completes here; a failure is an error of this call.
  if (path == verbs::ConnectPath::kStore && p.conn->state() == verbs::ConnState::kFailed) {
    return make_status(StatusCode::kUnavailable, "verbs: connecting to rank %d: %s", peer,
                       p.conn->error().c_str());
  }
  return Status::Ok();
}

Status VerbsTransport::modify_qp_from_store(int peer) {
  Peer& p = peers_[peer];
  const verbs::QpAddress& a = p.address;
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
  verbs::apply_qp_settings(qp_settings_, rtr, rtr_mask);
  if (api_->modify_qp(p.qp, &rtr, rtr_mask) != 0) {
    return make_status(StatusCode::kUnavailable, "QP to rank %d to RTR: %s", peer,
                       errno_text().c_str());
  }
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = p.psn;
  rts.max_rd_atomic = 1;
  int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  verbs::apply_qp_settings(qp_settings_, rts, rts_mask);
  if (api_->modify_qp(p.qp, &rts, rts_mask) != 0) {
    return make_status(StatusCode::kUnavailable, "QP to rank %d to RTS: %s", peer,
                       errno_text().c_str());
  }
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
    verbs::apply_qp_settings(qp_settings_, attr, mask);
    if (api_->modify_qp(p.qp, &attr, mask) != 0) {
      return make_status(StatusCode::kUnavailable, "QP to rank %d to %s: %s", peer, name,
                         errno_text().c_str());
    }
  }
  return Status::Ok();
}

rdma_conn_param VerbsTransport::conn_param(int peer, std::vector<uint8_t>& hello) const {
  hello = verbs::encode_hello({rank(), peer, instance_});
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

Status VerbsTransport::perform(int peer, verbs::ConnAction a, rdma_cm_id* request) {
  using A = verbs::ConnAction;
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
      const verbs::QpAddress& pa = p.address;
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
      if (request != nullptr) {
        api_->reject(request, nullptr, 0);
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
      EC_DEBUG(kNet, "verbs: rank %d connected to rank %d (%s)", rank(), peer,
               verbs::connect_path_name(p.conn->path()));
      return Status::Ok();
    case A::kReportFailure:
      fail_peer(peer, "connection: " + p.conn->error());
      return Status::Ok();
  }
  return Status::Ok();
}

void VerbsTransport::drive(int peer, verbs::ConnEvent e, const std::string& detail,
                           rdma_cm_id* request) {
  using A = verbs::ConnAction;
  Peer& p = peers_[peer];
  std::deque<std::pair<verbs::ConnEvent, std::string>> events{{e, detail}};
  while (!events.empty()) {
    auto [event, why] = std::move(events.front());
    events.pop_front();
    for (const A a : p.conn->on(event, why)) {
      const Status s = perform(peer, a, request);
      const bool modify = a == A::kModifyQpFromCm || a == A::kModifyQpFromStore;
      if (!s.ok()) {
        // The rest of this batch depended on the failed step.
        events.emplace_back(modify ? verbs::ConnEvent::kQpFailed : verbs::ConnEvent::kActionFailed,
                            std::string(s.message()));
        break;
      }
      if (modify) events.emplace_back(verbs::ConnEvent::kQpReady, std::string());
    }
  }
}

void VerbsTransport::on_connect_request(rdma_cm_id* id, std::span<const uint8_t> data) {
  const auto hello = verbs::decode_hello(data, rank(), size());
  if (!hello.ok()) {
    EC_WARN(kNet, "verbs: rank %d refuses an rdma_cm request: %s", rank(),
            std::string(hello.status().message()).c_str());
    api_->reject(id, nullptr, 0);
    api_->destroy_id(id);
    return;
  }
  const int peer = hello.value().from;
  Peer& p = peers_[peer];
  if (!p.conn) {  // before our connect(): the QP is ready, the address comes later
    p.conn = std::make_unique<verbs::Connection>(verbs::ConnectPath::kCm,
                                                 verbs::cm_active(rank(), peer));
    p.hello_instance = hello.value().instance;
  } else if (started(peer) && hello.value().instance != p.address.instance) {
    EC_WARN(kNet, "verbs: rank %d refuses an rdma_cm request from another instance of rank %d",
            rank(), peer);
    api_->reject(id, nullptr, 0);
    api_->destroy_id(id);
    return;
  }
  drive(peer, verbs::ConnEvent::kConnectRequest, {}, id);
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
    using E = verbs::ConnEvent;
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        drive(peer, E::kAddressResolved);
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED:
        drive(peer, E::kRouteResolved);
        break;
      case RDMA_CM_EVENT_CONNECT_RESPONSE: {
        const auto hello = verbs::decode_hello(data, rank(), size());
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
      case RDMA_CM_EVENT_REJECTED:
        drive(peer, E::kRejected, detail);
        break;
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

Status VerbsTransport::check_sendable(int peer, const char* what) {
  if (closed_) return make_status(StatusCode::kAborted, "verbs: %s: transport closed", what);
  if (peer < 0 || peer >= size() || peer == rank()) {
    return make_status(StatusCode::kInvalidArgument, "verbs: %s: rank %d is not a peer", what,
                       peer);
  }
  const Peer& p = peers_[peer];
  if (!started(peer)) {
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
  if (!p.connected) return Status(StatusCode::kBusy, {});
  return Status::Ok();
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
  if (!p.credits.can_send() || p.sends + 1 >= kSendDepth) return Status(StatusCode::kBusy, {});
  const bool user_write = what != Post::kNotify;
  const Signal signal = next_signal(p, true);
  uint64_t wr_id = control_wr_id(peer, signal.retires);
  uint32_t slot = 0;
  if (user_write) {
    if (free_slots_.empty()) {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.push_back({});
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    slots_[slot] = SendSlot{peer, tag, cookie, signal.retires};
    wr_id = slot;
  }
  ibv_sge sge{local_addr, static_cast<uint32_t>(bytes), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = bytes > 0 ? &sge : nullptr;
  wr.num_sge = bytes > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool inlined = bytes > 0 && bytes <= inline_max_ && what == Post::kHostWrite;
  wr.send_flags = (signal.signaled ? IBV_SEND_SIGNALED : 0) | (inlined ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(tag);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(p.qp, &wr, &bad); e != 0) {
    if (user_write) free_slots_.push_back(slot);
    if (e == ENOMEM) return Status(StatusCode::kBusy, {});
    fail_peer(peer, std::string("ibv_post_send: ") + std::strerror(e));
    return make_status(StatusCode::kPeerFailed, "verbs: posting a write to rank %d: %s", peer,
                       std::strerror(e));
  }
  p.credits.on_sent();
  on_posted(p, signal);
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
  const Signal signal = next_signal(p, false);
  ibv_send_wr wr{};
  wr.wr_id = control_wr_id(peer, signal.retires);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;  // no immediate: consumes no receive at the peer
  wr.send_flags = (signal.signaled ? IBV_SEND_SIGNALED : 0) |
                  (inline_max_ >= sizeof(uint64_t) ? IBV_SEND_INLINE : 0);
  wr.wr.rdma.remote_addr = p.credit_addr + static_cast<uint64_t>(rank()) * 8;
  wr.wr.rdma.rkey = p.credit_rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(p.qp, &wr, &bad); e != 0) {
    p.credit_due = true;
    return;
  }
  p.returns.publish();
  p.credit_due = false;
  on_posted(p, signal);
}

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
  EC_ERROR(kNet, "verbs: rank %d lost rank %d: %s", rank(), peer, why.c_str());
  errors_.push(TransportCompletion::Kind::kPeerError, peer, 0, 0);
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
      if (w.wr_id & kReceive) {
        if (w.status != IBV_WC_SUCCESS) {
          fail_peer(peer, completion_error(w.status));
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
      // A send completion: a user write, or a control request (notify, credit update, fence).
      retire(p, retired_by(w));
      if (w.wr_id & kControl) {
        if (w.status != IBV_WC_SUCCESS) fail_peer(peer, completion_error(w.status));
        continue;
      }
      if (w.wr_id >= slots_.size()) continue;  // ours are always in range; defensive
      const SendSlot s = slots_[w.wr_id];
      free_slots_.push_back(static_cast<uint32_t>(w.wr_id));
      if (w.status != IBV_WC_SUCCESS) {
        fail_peer(peer, completion_error(w.status));
        continue;
      }
      out[n++] =
          TransportCompletion{TransportCompletion::Kind::kWriteDone, s.peer, s.tag, s.cookie};
    }
  }
  // A peer's disconnect acts once the CQ is drained (defect 5, cm half): what it sent before
  // disconnecting completed here first, and its exit notice must not be overtaken by "lost".
  for (int peer = 0; drained && peer < size(); ++peer) {
    Peer& p = peers_[peer];
    if (!p.disconnect) continue;
    const std::string why = std::move(*p.disconnect);
    p.disconnect.reset();
    if (p.connected && !p.failed) {
      // A connected peer that disconnects has closed its transport: it left, as a shm peer
      // whose beacon is gone did; no failure unless something is sent to it (as on the store
      // path, where a closed peer's QP simply stops answering).
      p.left = true;
      EC_DEBUG(kNet, "verbs: rank %d: rank %d disconnected (%s)", rank(), peer, why.c_str());
    } else {
      drive(peer, verbs::ConnEvent::kDisconnected, why);  // during set-up: a failure
    }
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peers_[peer].credit_due && !peers_[peer].failed) post_credit(peer);
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
  if (!flush_devices_.empty() && n > 0) {
    bool notified = false;
    for (size_t i = 0; i < n; ++i) notified |= out[i].kind == TransportCompletion::Kind::kNotify;
    if (notified) {
      for (const int device : flush_devices_) {
        if (const Status s = gpu::flush_rdma_writes(device); !s.ok()) {
          EC_ERROR(kNet, "verbs: flushing GPUDirect writes to GPU %d failed: %s", device,
                   s.to_string().c_str());
        }
      }
    }
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

void VerbsTransport::close() {
  if (closed_) return;
  closed_ = true;
  drain_sends();
  // rdma_cm ids before the queue pairs and the channel (ids must go before their channel).
  for (int peer = 0; peer < static_cast<int>(peers_.size()); ++peer) {
    if (peers_[peer].conn) drive(peer, verbs::ConnEvent::kClose);
    if (peers_[peer].id != nullptr) api_->destroy_id(peers_[peer].id);
    peers_[peer].id = nullptr;
  }
  if (listen_id_ != nullptr) api_->destroy_id(listen_id_);
  listen_id_ = nullptr;
  if (cm_channel_ != nullptr) api_->destroy_event_channel(cm_channel_);
  cm_channel_ = nullptr;
  for (Peer& p : peers_) {
    if (p.qp != nullptr) api_->destroy_qp(p.qp);
    p.qp = nullptr;
  }
  if (cq_ != nullptr) api_->destroy_cq(cq_);
  cq_ = nullptr;
  if (channel_ != nullptr) api_->destroy_comp_channel(channel_);
  channel_ = nullptr;
  credit_in_.reset();  // regions held by users keep the device context alive themselves
  credit_out_.reset();
}

void VerbsTransport::drain_sends() {
  // What close() destroys next, a queue pair, discards the work requests it has not executed:
  // the exit notices just posted and the last writes (issue 18, defect 5). Wait for their
  // completions first, at most kCloseDrain: a peer that no longer answers costs the retries.
  const auto deadline = std::chrono::steady_clock::now() + kCloseDrain;
  // The unsignaled tail is credit updates, which nobody needs once we close.
  auto waits_for = [](const Peer& p) {
    return p.qp != nullptr && p.connected && !p.failed && p.sends > p.unsignaled;
  };
  auto pending = [&] { return std::any_of(peers_.begin(), peers_.end(), waits_for); };
  while (cq_ != nullptr && pending() && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[32];
    const int got = ibv_poll_cq(cq_, 32, wc);
    if (got < 0) break;
    if (got == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    for (int i = 0; i < got; ++i) {
      const auto qp = qp_to_peer_.find(wc[i].qp_num);
      if (qp == qp_to_peer_.end() || (wc[i].wr_id & kReceive)) continue;
      Peer& p = peers_[qp->second];
      retire(p, retired_by(wc[i]));
      if (wc[i].status != IBV_WC_SUCCESS) p.failed = true;  // nothing more will complete
    }
  }
  // Out of time: what destroying the queue pairs discards is named, with the counts that kept
  // the wait going. Info, not a warning: today a plain multi-process shutdown on the emulated
  // device ends here too (the last exit notices to peers that closed first never complete).
  for (int peer = 0; peer < static_cast<int>(peers_.size()); ++peer) {
    const Peer& p = peers_[peer];
    if (!waits_for(p)) continue;
    EC_INFO(kNet,
            "verbs: close: %u send requests to rank %d (%u of them unsignaled credit updates) had "
            "not completed within %lld ms; they are discarded with its queue pair",
            p.sends, peer, p.unsignaled,
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::milliseconds>(kCloseDrain).count()));
  }
}

}  // namespace

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
  auto t = std::make_unique<VerbsTransport>(params.rank, params.size, *api);
  EC_RETURN_IF_ERROR(t->init(config));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace eagercomm
