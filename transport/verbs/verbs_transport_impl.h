// Internal: the verbs transport's class (the protocol is verbs_transport.h's). Not installed.
//
// One class, its jobs in a file each:
//   verbs_transport.cc           creation: device, port, protection domain, CQ, a QP per peer,
//                                the address it publishes; connect() and the store path
//   verbs_transport_cm.cc        the rdma_cm path: listener, ids, events, QP from the CM
//   verbs_transport_data.cc      the data path: write(), notify(), receive credits, poll(),
//                                wait(), wake()
//   verbs_transport_failures.cc  lost peers and the device's async events
//   verbs_transport_close.cc     close(): draining posted sends, then the teardown
// and the parts with their own state: memory registration (verbs_memory.h) and the send-queue
// bookkeeping (verbs_send_queue.h).
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/unique_fd.h"
#include "transport/local_completions.h"
#include "transport/transport.h"
#include "transport/transport_config.h"
#include "transport/verbs/verbs_api.h"
#include "transport/verbs/verbs_cm_address.h"
#include "transport/verbs/verbs_connect.h"
#include "transport/verbs/verbs_credits.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_memory.h"
#include "transport/verbs/verbs_qp_settings.h"
#include "transport/verbs/verbs_send_queue.h"
#include "transport/verbs/verbs_wire.h"

namespace eagercomm::verbs {

inline constexpr uint32_t kReceiveWindow = 64;  // receives posted per sender: its credits
inline constexpr uint32_t kWantInline = 64;     // bytes sent inline when the device allows
inline constexpr int kCmTimeoutMs = 2000;       // rdma_resolve_addr / _route
inline constexpr int kCmBacklog = 1024;         // pending connect requests on the listener
inline constexpr uint32_t kAsyncEvery = 1024;   // poll() calls between reads of the async events
// The longest sleep in wait() (the header says why it is bounded).
inline constexpr std::chrono::milliseconds kNap{1};
// close(): the longest wait for posted sends to execute.
inline constexpr std::chrono::seconds kCloseDrain{2};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(int rank, int size, const VerbsApi& api);
  ~VerbsTransport() override { close(); }

  Status init(const TransportConfig& config);

  std::string_view name() const override { return "verbs"; }
  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) override {
    return memory_.allocate(bytes, kind);
  }
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind kind) override {
    return memory_.register_memory(data, bytes, kind);
  }
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
  // Over rdma_cm a pair connects on demand: the first write or notify from either side makes its
  // queue pair and connects (verbs_connect.h); the store path connects every pair at creation.
  TransportCaps capabilities() const override { return {.connects_on_demand = offers_cm_}; }
  uint32_t connected_peers() const override {
    uint32_t n = 0;
    for (const Peer& p : peers_)
      n += p.qp != nullptr;  // a queue pair held for it, connected or not
    return n;
  }
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
    ibv_qp* qp = nullptr;              // at creation (store path), else when first needed
    uint32_t psn = 0;                  // our first send PSN on this QP
    uint32_t inline_max = 0;           // the inline size its creation granted
    std::unique_ptr<Connection> conn;  // made by connect(), or by the peer's cm request
    rdma_cm_id* id = nullptr;          // the cm path's id for this pair
    bool known = false;                // connect() gave its address
    QpAddress address;                 // the peer's, from connect()
    uint64_t hello_instance = 0;       // from a cm request that came before connect()
    bool connected = false;            // the QP is in RTS
    bool failed = false;
    std::string failed_why;  // the cause fail_peer() was given (peer_error)
    uint64_t instance = 0;   // the peer transport's, from its address
    uint64_t credit_addr = 0;
    uint32_t credit_rkey = 0;
    SendQueue send_queue;
    SendCredits credits{kReceiveWindow};
    ReturnCredits returns{kReceiveWindow};
    bool credit_due = false;                // a credit update waits for send-queue room
    std::optional<std::string> disconnect;  // RDMA_CM_EVENT_DISCONNECTED seen, not acted on
    bool left = false;                      // it disconnected after connecting: closed
  };
  // What post_write() is posting: a write() of host memory, of memory the CPU may not read
  // (GPU memory the NIC reaches directly: never inline, which the CPU would copy: defect 1),
  // or a notify().
  enum class Post { kHostWrite, kDeviceWrite, kNotify };

  // verbs_transport.cc
  // The device, port and GID (`ip`: the address rdma_cm would use, when one was looked for).
  Status choose_port(const TransportConfig& config, CmAddress& ip);
  // Opens it: context, protection domain, completion channel and queue, wake-up eventfd.
  Status open_device();
  // The QP for `peer`, in INIT with its receives posted (nothing when it exists).
  Status create_queue_pair(int peer);
  // A QP per peer (the store path); their numbers and PSNs into `address`.
  Status create_queue_pairs(QpAddress& address);
  Status modify_qp_from_store(int peer);

  // verbs_transport_cm.cc
  Status setup_cm(const TransportConfig& config, const CmAddress& ip);
  // Feeds `e` to the peer's connection and performs what it asks (verbs_connect.h).
  void drive(int peer, ConnEvent e, const std::string& detail = {}, rdma_cm_id* request = nullptr);
  Status perform(int peer, ConnAction a, rdma_cm_id* request);
  Status modify_qp_from_cm(int peer);
  rdma_conn_param conn_param(int peer, std::vector<uint8_t>& hello) const;
  void progress_cm();
  void on_connect_request(rdma_cm_id* id, std::span<const uint8_t> data);
  // The first write or notify to a peer not connected yet: over rdma_cm this side connects now
  // (its queue pair made first). kBusy while connecting, kPeerFailed when that failed.
  Status connect_on_demand(int peer);

  // verbs_transport_data.cc
  Status check_sendable(int peer, const char* what);
  Status post_write(int peer, uint64_t local_addr, uint32_t lkey, uint64_t remote_addr,
                    uint32_t rkey, size_t bytes, uint32_t tag, uint64_t cookie, Post what);
  Status post_receive(int peer);
  void post_credit(int peer);
  uint64_t credit_word(int peer) const;
  // One receive completion of `peer`: its receive posted again, the sender's credit returned.
  // False when the peer failed instead.
  bool on_receive(int peer, const ibv_wc& w);
  // Acts on the disconnects seen by progress_cm(), once the CQ is drained.
  void act_on_disconnects();
  // The GPUDirect flush before notifications are delivered (see poll()).
  void flush_gpudirect_writes(std::span<const TransportCompletion> delivered);

  // verbs_transport_failures.cc
  void fail_peer(int peer, const std::string& why);
  void fail_all(const std::string& why);
  std::string completion_error(ibv_wc_status status) const;
  std::string retry_window() const;  // how long a write retries before its peer is lost
  void read_async_events();

  // verbs_transport_close.cc
  void drain_sends();

  std::shared_ptr<Core> core_;
  const VerbsApi* const api_;  // core_->api, the table every call goes through
  const uint64_t instance_;    // this transport's, in its address and keys
  MemoryRegistrar memory_;
  Endpoint endpoint_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  UniqueFd wake_fd_;
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
  WriteSlots writes_;
  LocalCompletions errors_;  // peer errors found outside ibv_poll_cq (while posting)
  QpSettings qp_settings_;
  uint32_t max_message_ = UINT32_MAX;       // the port's max_msg_sz
  uint32_t polls_since_async_ = 0;          // poll() calls since it last read the async events
  std::atomic<bool> async_pending_{false};  // wait() saw the async fd readable
  std::atomic<bool> woken_{false};
  bool closed_ = false;
};

}  // namespace eagercomm::verbs
