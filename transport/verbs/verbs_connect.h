// How the verbs transport connects the RC queue pair it made for one peer (issue #6, item 1).
//
// Two paths:
//  - cm: librdmacm on the peer's IP address (IPoIB on InfiniBand, the interface's address on
//    RoCE), exchanged through the store in the verbs address. A pair connects on demand (issue
//    21): the side that first has something to send is the active one (resolve address, resolve
//    route, connect) and makes its queue pair then; the other accepts on its listener, making
//    its own queue pair for the request. When both start at once (their requests cross), the
//    higher rank's attempt wins: it refuses the lower rank's request with a hello of its own
//    (kRejectCrossed), and the lower rank drops its attempt and accepts the higher one's,
//    whichever of the refusal and the request reaches it first. The queue pairs stay the
//    transport's own
//    ("user-managed" in rdma_cm's terms): the CM request and reply carry their numbers, and each
//    side moves its QP to RTR and RTS with the attributes rdma_init_qp_attr() derives from the
//    CM exchange (path, MTU, PSNs), so rdma_cm handles path records, GIDs and RoCE routing.
//  - store: the documented fallback. QP numbers, LID/GID and PSNs travel in the verbs address
//    through the store and each side moves its QP with them (works with no IP on the device).
//    Every pair is connected at creation: a queue pair per peer, published before anyone knows
//    which peers it will talk to.
// A job uses one path for all pairs: a rank that connects on demand publishes no queue pairs, so
// a peer that only has the store path cannot reach it (choose_connect_path() says so).
//
// choose_connect_path() picks one per pair from EAGERCOMM_IB_CONNECT and what both sides offer,
// and Connection is the per-peer state machine: events in (rdma_cm events, connect(), results
// of the actions it asked for), actions out. Both are pure, so every transition is unit-tested
// without a device (tests/transport/verbs_connect_test.cc); verbs_transport.cc performs the
// actions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "transport/verbs/verbs_config.h"

namespace eagercomm::verbs {

enum class ConnectPath : uint8_t { kCm, kStore };
const char* connect_path_name(ConnectPath path);

// Whether this rank offers rdma_cm at all: EAGERCOMM_IB_CONNECT and whether an IP address of
// the chosen device/port was found (`why_no_ip` says why not). kInvalidArgument for
// EAGERCOMM_IB_CONNECT=cm on a device with no IP address.
Result<bool> offers_cm(IbConnectMode mode, bool device_has_ip, const std::string& why_no_ip);

// The path for one pair: cm when both sides offer it, store when neither does. Both ranks
// compute the same answer from the two addresses. kInvalidArgument when only one side offers
// cm (it publishes no queue pairs for the store path), naming what to set.
Result<ConnectPath> choose_connect_path(IbConnectMode mode, bool local_offers_cm,
                                        bool peer_offers_cm, int peer);

// Which attempt survives when both sides of a cm pair connect at once: the higher rank's.
inline bool cm_wins_crossing(int rank, int peer) { return rank > peer; }

enum class ConnState : uint8_t {
  kIdle,              // nothing known yet
  kAwaitingRequest,   // cm: the address is known; neither side has started connecting
  kResolvingAddress,  // cm, active: rdma_resolve_addr issued
  kResolvingRoute,    // cm, active: rdma_resolve_route issued
  kConnecting,        // cm, active: rdma_connect issued, waiting for the reply
  kReadying,          // moving the QP to RTR and RTS
  kAccepting,         // cm, passive: rdma_accept issued, waiting for ESTABLISHED
  kConnected,         // the QP is in RTS: writes may go
  kFailed,            // gave up (the reason is in Connection::error())
  kClosed,
};
const char* conn_state_name(ConnState s);

enum class ConnEvent : uint8_t {
  kStart,            // connect() with the peer's address: the path is known
  kFirstSend,        // cm: this side has something to send: it connects (the active side)
  kAddressResolved,  // RDMA_CM_EVENT_ADDR_RESOLVED
  kRouteResolved,    // RDMA_CM_EVENT_ROUTE_RESOLVED
  kConnectRequest,   // RDMA_CM_EVENT_CONNECT_REQUEST from this peer (checked hello)
  kConnectResponse,  // RDMA_CM_EVENT_CONNECT_RESPONSE (checked hello)
  kEstablished,      // RDMA_CM_EVENT_ESTABLISHED
  kQpReady,          // the QP reached RTS (result of kModifyQpFromCm / kModifyQpFromStore)
  kQpFailed,         // ibv_modify_qp failed
  kTransient,        // ADDR_ERROR, ROUTE_ERROR, UNREACHABLE, CONNECT_ERROR: may be retried
  kRejected,         // RDMA_CM_EVENT_REJECTED: the peer refused (wrong instance, not a peer)
  kRejectedCrossed,  // RDMA_CM_EVENT_REJECTED with the peer's hello: its own request wins
  kDisconnected,     // RDMA_CM_EVENT_DISCONNECTED / DEVICE_REMOVAL
  kActionFailed,     // an rdma_* call the machine asked for returned an error
  kClose,            // the transport closes
};
const char* conn_event_name(ConnEvent e);

enum class ConnAction : uint8_t {
  kCreateId,           // rdma_create_id on the transport's event channel
  kResolveAddress,     // rdma_resolve_addr(our IP -> the peer's IP)
  kResolveRoute,       // rdma_resolve_route
  kConnect,            // rdma_connect with our QP number and hello
  kModifyQpFromCm,     // rdma_init_qp_attr + ibv_modify_qp to RTR then RTS; report kQpReady
  kModifyQpFromStore,  // ibv_modify_qp to RTR then RTS with the store values; report kQpReady
  kAccept,             // rdma_accept with our QP number and hello
  kEstablish,          // rdma_establish (active side, user-managed QP)
  kReject,             // rdma_reject the request that came with the event
  kRejectCrossed,      // rdma_reject it with our hello: our own request is under way and wins
  kDisconnect,         // rdma_disconnect
  kDestroyId,          // rdma_destroy_id of this peer's id
  kReportConnected,    // writes to the peer may go
  kReportFailure,      // the peer is lost: kPeerError, later writes kPeerFailed
};
const char* conn_action_name(ConnAction a);

// One peer's connection. Not thread-safe (the transport's driver owns it).
class Connection {
 public:
  // `wins_crossing`: this side's attempt survives when both connect at once
  // (cm_wins_crossing()); ignored on the store path. `retries`: how many times a transient
  // failure of the active side starts over from address resolution.
  explicit Connection(ConnectPath path, bool wins_crossing = false, int retries = 3)
      : path_(path), wins_crossing_(wins_crossing), retries_left_(retries) {}

  // Feeds one event; returns the actions to perform, in order. An event that makes no sense in
  // the current state fails the connection (with the state and event in error()) rather than
  // being guessed at, except duplicates that are harmless (a second kStart, a late ESTABLISHED).
  std::vector<ConnAction> on(ConnEvent e, const std::string& detail = {});

  ConnState state() const { return state_; }
  ConnectPath path() const { return path_; }
  bool active() const { return active_; }
  bool connected() const { return state_ == ConnState::kConnected; }
  // Whether the peer's connect() has been called (then its address is known).
  bool started() const { return started_; }
  const std::string& error() const { return error_; }

 private:
  std::vector<ConnAction> fail(const std::string& why, bool has_id);
  bool has_id() const;

  // Whether this side's attempt is in flight and its queue pair untouched (a crossing request
  // may still take its place).
  bool before_qp() const;

  ConnectPath path_;
  bool wins_crossing_;
  bool active_ = false;   // this side connects (after kFirstSend)
  bool yielded_ = false;  // its attempt lost a crossing: it waits for the peer's request
  int retries_left_;
  bool started_ = false;
  ConnState state_ = ConnState::kIdle;
  std::string error_;
};

}  // namespace eagercomm::verbs
