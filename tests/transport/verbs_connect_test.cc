// The verbs transport's connection set-up without a device: the choice between rdma_cm and the
// store path (EAGERCOMM_IB_CONNECT), the IP address rdma_cm would use, and every transition of
// the per-peer state machine (events in, actions out; verbs_connect.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <tuple>
#include <vector>

#include "collectives/config.h"
#include "transport/verbs/verbs_cm_address.h"
#include "transport/verbs/verbs_connect.h"

namespace eagercomm::verbs {
namespace {

using A = ConnAction;
using E = ConnEvent;
using S = ConnState;
using Actions = std::vector<ConnAction>;

TEST(VerbsConnectPath, OffersCmByModeAndAddress) {
  EXPECT_TRUE(offers_cm(IbConnectMode::kAuto, true, "").value());
  EXPECT_FALSE(offers_cm(IbConnectMode::kAuto, false, "no ip").value());
  EXPECT_FALSE(offers_cm(IbConnectMode::kStore, true, "").value());
  EXPECT_TRUE(offers_cm(IbConnectMode::kCm, true, "").value());
  auto r = offers_cm(IbConnectMode::kCm, false, "no IPv4 address on mlx5_0 port 1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("EAGERCOMM_IB_CONNECT=cm"), std::string::npos);
  EXPECT_NE(r.status().message().find("no IPv4 address on mlx5_0 port 1"), std::string::npos);
}

TEST(VerbsConnectPath, CmWhenBothOfferItStoreWhenNeither) {
  EXPECT_EQ(choose_connect_path(IbConnectMode::kAuto, true, true, 1).value(), ConnectPath::kCm);
  EXPECT_EQ(choose_connect_path(IbConnectMode::kAuto, false, false, 1).value(),
            ConnectPath::kStore);
  EXPECT_EQ(choose_connect_path(IbConnectMode::kStore, false, false, 1).value(),
            ConnectPath::kStore);
  EXPECT_EQ(choose_connect_path(IbConnectMode::kCm, true, true, 1).value(), ConnectPath::kCm);
  auto r = choose_connect_path(IbConnectMode::kCm, true, false, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 5 offers no rdma_cm"), std::string::npos);
  // One side offering rdma_cm connects on demand and publishes no queue pairs: a mixed pair
  // cannot fall back to the store, and both sides say what to set.
  for (const auto& [mode, local, peer] : {std::tuple{IbConnectMode::kAuto, true, false},
                                          std::tuple{IbConnectMode::kAuto, false, true},
                                          std::tuple{IbConnectMode::kStore, false, true}}) {
    auto mixed = choose_connect_path(mode, local, peer, 2);
    ASSERT_FALSE(mixed.ok()) << local << peer;
    EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(mixed.status().message().find("rank 2"), std::string::npos);
    EXPECT_NE(mixed.status().message().find("EAGERCOMM_IB_CONNECT=store on every rank"),
              std::string::npos)
        << mixed.status().message();
  }
  // Both sides agree: the answer is symmetric in what the two offer.
  for (bool a : {false, true}) {
    for (bool b : {false, true}) {
      auto ab = choose_connect_path(IbConnectMode::kAuto, a, b, 0);
      auto ba = choose_connect_path(IbConnectMode::kAuto, b, a, 0);
      ASSERT_EQ(ab.ok(), ba.ok());
      if (ab.ok()) {
        EXPECT_EQ(ab.value(), ba.value());
      }
    }
  }
  EXPECT_TRUE(cm_wins_crossing(3, 1));
  EXPECT_FALSE(cm_wins_crossing(1, 3));
}

IpCandidate ip(const char* itf, uint8_t family, std::initializer_list<uint8_t> bytes,
               const char* device, uint8_t port) {
  IpCandidate c;
  c.interface = itf;
  c.family = family;
  size_t i = 0;
  for (uint8_t b : bytes) c.ip[i++] = b;
  c.device = device;
  c.port = port;
  return c;
}

TEST(VerbsCmAddress, PrefersIpv4OfTheDevicePortThenGlobalIpv6) {
  const std::vector<IpCandidate> host = {
      ip("eth0", 4, {192, 168, 1, 5}, "", 0),                        // no RDMA
      ip("ib0", 6, {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1}, "mlx5_0", 1),  // link-local
      ip("ib0", 6, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, "mlx5_0", 1),
      ip("ib0", 4, {10, 0, 0, 7}, "mlx5_0", 1),
      ip("ib1", 4, {10, 0, 1, 7}, "mlx5_1", 1),
  };
  CmAddress a = choose_cm_address(host, "mlx5_0", 1);
  ASSERT_TRUE(a.found);
  EXPECT_EQ(a.family, 4);
  EXPECT_EQ(a.ip[3], 7);
  EXPECT_EQ(a.to_string(), "10.0.0.7 (ib0)");
  a = choose_cm_address(std::span(host).first(3), "mlx5_0", 1);
  ASSERT_TRUE(a.found);
  EXPECT_EQ(a.family, 6);
  EXPECT_EQ(a.ip[0], 0x20);  // the global one, not fe80::
  a = choose_cm_address(std::span(host).first(2), "mlx5_0", 1);
  EXPECT_FALSE(a.found);
  EXPECT_NE(a.why_none.find("mlx5_0 port 1"), std::string::npos) << a.why_none;
  EXPECT_FALSE(choose_cm_address(host, "mlx5_0", 2).found);  // another port
  EXPECT_EQ(choose_cm_address(host, "mlx5_1", 1).ip[2], 1);
}

// This host, whatever it has: an address comes with an interface and no reason, no address with
// a reason.
TEST(VerbsCmAddress, ThisHost) {
  const CmAddress a = find_cm_address("mlx5_0", 1);
  if (a.found) {
    EXPECT_TRUE(a.why_none.empty()) << a.why_none;
    EXPECT_FALSE(a.interface.empty());
    EXPECT_TRUE(a.family == 4 || a.family == 6) << int{a.family};
    EXPECT_NE(a.ip, (std::array<uint8_t, 16>{})) << a.to_string();
  } else {
    EXPECT_FALSE(a.why_none.empty());
  }
}

TEST(VerbsConnection, StorePathIsOneStep) {
  Connection c(ConnectPath::kStore, /*active=*/false);
  EXPECT_EQ(c.on(E::kStart), (Actions{A::kModifyQpFromStore}));
  EXPECT_EQ(c.state(), S::kReadying);
  EXPECT_TRUE(c.started());
  EXPECT_EQ(c.on(E::kQpReady), (Actions{A::kReportConnected}));
  EXPECT_TRUE(c.connected());
  EXPECT_EQ(c.on(E::kStart), Actions{});  // connect() is idempotent
  EXPECT_EQ(c.on(E::kClose), Actions{});  // no id to destroy
  EXPECT_EQ(c.state(), S::kClosed);
}

TEST(VerbsConnection, StorePathRefusesCmRequestsAndReportsQpFailure) {
  Connection c(ConnectPath::kStore, false);
  EXPECT_EQ(c.on(E::kConnectRequest), (Actions{A::kReject}));
  EXPECT_EQ(c.state(), S::kIdle);
  c.on(E::kStart);
  EXPECT_EQ(c.on(E::kQpFailed, "QP to rank 1 to RTR: Invalid argument"),
            (Actions{A::kReportFailure}));
  EXPECT_EQ(c.state(), S::kFailed);
  EXPECT_NE(c.error().find("RTR/RTS failed: QP to rank 1 to RTR"), std::string::npos) << c.error();
  EXPECT_EQ(c.on(E::kQpReady), Actions{});  // finished: ignored
}

TEST(VerbsConnection, ActiveCmSideConnectsOnItsFirstSend) {
  Connection c(ConnectPath::kCm);
  EXPECT_EQ(c.on(E::kStart), Actions{});  // the address is known: nothing happens yet
  EXPECT_EQ(c.state(), S::kAwaitingRequest);
  EXPECT_FALSE(c.active());
  EXPECT_EQ(c.on(E::kFirstSend), (Actions{A::kCreateId, A::kResolveAddress}));
  EXPECT_TRUE(c.active());
  EXPECT_EQ(c.state(), S::kResolvingAddress);
  EXPECT_EQ(c.on(E::kFirstSend), Actions{});  // every later send while connecting
  EXPECT_EQ(c.on(E::kAddressResolved), (Actions{A::kResolveRoute}));
  EXPECT_EQ(c.on(E::kRouteResolved), (Actions{A::kConnect}));
  EXPECT_EQ(c.state(), S::kConnecting);
  EXPECT_EQ(c.on(E::kConnectResponse), (Actions{A::kModifyQpFromCm}));
  EXPECT_EQ(c.on(E::kQpReady), (Actions{A::kEstablish, A::kReportConnected}));
  EXPECT_TRUE(c.connected());
  EXPECT_EQ(c.on(E::kEstablished), Actions{});  // may follow rdma_establish: harmless
  EXPECT_EQ(c.on(E::kFirstSend), Actions{});
  EXPECT_EQ(c.on(E::kClose), (Actions{A::kDisconnect, A::kDestroyId}));
}

// Both sides send first at once: the higher rank's attempt goes on; the lower rank drops its own
// whether the refusal or the higher rank's request reaches it first, and never starts again.
TEST(VerbsConnection, CrossingRequestsLeaveTheHigherRanksAttempt) {
  const auto connecting = [](bool higher) {
    auto c = std::make_unique<Connection>(ConnectPath::kCm, higher);
    c->on(E::kStart);
    c->on(E::kFirstSend);
    c->on(E::kAddressResolved);
    c->on(E::kRouteResolved);
    return c;
  };
  auto high = connecting(true);
  EXPECT_EQ(high->on(E::kConnectRequest), (Actions{A::kRejectCrossed}));
  EXPECT_EQ(high->state(), S::kConnecting);
  EXPECT_EQ(high->on(E::kConnectResponse), (Actions{A::kModifyQpFromCm}));
  EXPECT_EQ(high->on(E::kQpReady), (Actions{A::kEstablish, A::kReportConnected}));
  // Also while still resolving.
  Connection early(ConnectPath::kCm, true);
  early.on(E::kStart);
  early.on(E::kFirstSend);
  EXPECT_EQ(early.on(E::kConnectRequest), (Actions{A::kRejectCrossed}));
  EXPECT_EQ(early.state(), S::kResolvingAddress);

  // The lower rank, the request first: its id goes, the request's id takes its place.
  auto low = connecting(false);
  EXPECT_EQ(low->on(E::kConnectRequest), (Actions{A::kDestroyId, A::kModifyQpFromCm}));
  EXPECT_FALSE(low->active());
  EXPECT_EQ(low->on(E::kQpReady), (Actions{A::kAccept}));
  EXPECT_EQ(low->on(E::kFirstSend), Actions{});
  EXPECT_EQ(low->on(E::kEstablished), (Actions{A::kReportConnected}));
  EXPECT_TRUE(low->connected());

  // The refusal first: it waits for the request and does not start again meanwhile.
  auto refused = connecting(false);
  EXPECT_EQ(refused->on(E::kRejectedCrossed), (Actions{A::kDestroyId}));
  EXPECT_EQ(refused->state(), S::kAwaitingRequest);
  EXPECT_EQ(refused->on(E::kFirstSend), Actions{});
  EXPECT_EQ(refused->on(E::kConnectRequest), (Actions{A::kModifyQpFromCm}));
  EXPECT_EQ(refused->on(E::kQpReady), (Actions{A::kAccept}));
  EXPECT_EQ(refused->on(E::kEstablished), (Actions{A::kReportConnected}));

  // A crossing refusal the higher rank cannot have been sent fails it, as any event out of turn.
  auto wrong = connecting(true);
  EXPECT_EQ(wrong->on(E::kRejectedCrossed), (Actions{A::kDestroyId, A::kReportFailure}));
  // The lower rank's attempt, once its QP moved, is not dropped for a late request: refused.
  auto late = connecting(false);
  late->on(E::kConnectResponse);
  EXPECT_EQ(late->on(E::kConnectRequest), (Actions{A::kReject}));
  EXPECT_EQ(late->state(), S::kReadying);
}

TEST(VerbsConnection, PassiveCmSideRequestBeforeOrAfterConnect) {
  for (bool request_first : {false, true}) {
    SCOPED_TRACE(request_first ? "request first" : "connect first");
    Connection c(ConnectPath::kCm, /*active=*/false);
    if (!request_first) {
      EXPECT_EQ(c.on(E::kStart), Actions{});
      EXPECT_EQ(c.state(), S::kAwaitingRequest);
    }
    EXPECT_EQ(c.on(E::kConnectRequest), (Actions{A::kModifyQpFromCm}));
    EXPECT_EQ(c.on(E::kQpReady), (Actions{A::kAccept}));
    EXPECT_EQ(c.state(), S::kAccepting);
    EXPECT_EQ(c.on(E::kConnectRequest), (Actions{A::kReject}));  // a duplicate
    EXPECT_EQ(c.on(E::kEstablished), (Actions{A::kReportConnected}));
    EXPECT_TRUE(c.connected());
    if (request_first) {
      EXPECT_FALSE(c.started());
      EXPECT_EQ(c.on(E::kStart), Actions{});
      EXPECT_TRUE(c.started());
      EXPECT_TRUE(c.connected());
    }
  }
}

TEST(VerbsConnection, ActiveSideRetriesTransientErrorsThenGivesUp) {
  Connection c(ConnectPath::kCm, true, /*retries=*/2);
  c.on(E::kStart);
  c.on(E::kFirstSend);
  const Actions again{A::kDestroyId, A::kCreateId, A::kResolveAddress};
  EXPECT_EQ(c.on(E::kTransient, "RDMA_CM_EVENT_ADDR_ERROR"), again);
  c.on(E::kAddressResolved);
  EXPECT_EQ(c.on(E::kTransient, "RDMA_CM_EVENT_ROUTE_ERROR"), again);
  c.on(E::kAddressResolved);
  c.on(E::kRouteResolved);
  EXPECT_EQ(c.on(E::kTransient, "RDMA_CM_EVENT_UNREACHABLE"),
            (Actions{A::kDestroyId, A::kReportFailure}));
  EXPECT_EQ(c.state(), S::kFailed);
  EXPECT_NE(c.error().find("(retries used up): RDMA_CM_EVENT_UNREACHABLE"), std::string::npos)
      << c.error();
  EXPECT_EQ(c.on(E::kConnectRequest), (Actions{A::kReject}));  // answered even when failed
  EXPECT_EQ(c.on(E::kClose), Actions{});
}

TEST(VerbsConnection, RejectionAndDisconnectionFail) {
  Connection c(ConnectPath::kCm, true);
  c.on(E::kStart);
  c.on(E::kFirstSend);
  c.on(E::kAddressResolved);
  c.on(E::kRouteResolved);
  EXPECT_EQ(c.on(E::kRejected, "RDMA_CM_EVENT_REJECTED (status 28)"),
            (Actions{A::kDestroyId, A::kReportFailure}));
  EXPECT_NE(c.error().find("rejected"), std::string::npos);

  Connection d(ConnectPath::kCm, false);
  d.on(E::kConnectRequest);
  d.on(E::kQpReady);
  d.on(E::kEstablished);
  EXPECT_EQ(d.on(E::kDisconnected), (Actions{A::kDestroyId, A::kReportFailure}));
  EXPECT_NE(d.error().find("the peer disconnected"), std::string::npos);

  // The passive side does not retry: its QP was already moved for that request.
  Connection e(ConnectPath::kCm, false);
  e.on(E::kConnectRequest);
  e.on(E::kQpReady);
  EXPECT_EQ(e.on(E::kTransient, "RDMA_CM_EVENT_CONNECT_ERROR"),
            (Actions{A::kDestroyId, A::kReportFailure}));
}

TEST(VerbsConnection, EventsOutOfOrderFailNamingStateAndEvent) {
  Connection c(ConnectPath::kCm, true);
  c.on(E::kStart);
  c.on(E::kFirstSend);
  EXPECT_EQ(c.on(E::kRouteResolved), (Actions{A::kDestroyId, A::kReportFailure}));
  EXPECT_NE(c.error().find("\"route resolved\" while resolving address (active side)"),
            std::string::npos)
      << c.error();

  Connection p(ConnectPath::kCm, false);
  EXPECT_EQ(p.on(E::kConnectResponse), (Actions{A::kReportFailure}));  // no id yet
  Connection q(ConnectPath::kCm, true);
  EXPECT_EQ(q.on(E::kFirstSend), (Actions{A::kReportFailure}));  // before the address is known
  EXPECT_NE(q.error().find("\"first send\" while idle"), std::string::npos) << q.error();
  Connection r(ConnectPath::kStore, false);
  EXPECT_EQ(r.on(E::kAddressResolved), (Actions{A::kReportFailure}));
  Connection s(ConnectPath::kCm, true);
  s.on(E::kStart);
  s.on(E::kFirstSend);
  EXPECT_EQ(s.on(E::kActionFailed, "rdma_resolve_addr: No such device"),
            (Actions{A::kDestroyId, A::kReportFailure}));
  EXPECT_NE(s.error().find("No such device"), std::string::npos);
}

TEST(VerbsConnection, CloseFromEveryStateReleasesTheIdOnce) {
  // Drive to each state, then close: an id exists exactly in the cm set-up and connected states.
  struct Case {
    bool higher;  // wins a crossing
    std::vector<ConnEvent> events;
    Actions on_close;
  };
  const std::vector<Case> cases = {
      {true, {}, {}},
      {true, {E::kStart, E::kFirstSend}, {A::kDestroyId}},
      {true, {E::kStart, E::kFirstSend, E::kAddressResolved}, {A::kDestroyId}},
      {true, {E::kStart, E::kFirstSend, E::kAddressResolved, E::kRouteResolved}, {A::kDestroyId}},
      {false, {E::kStart, E::kFirstSend, E::kRejectedCrossed}, {}},
      {false, {E::kStart}, {}},
      {false, {E::kConnectRequest}, {A::kDestroyId}},
      {false, {E::kConnectRequest, E::kQpReady}, {A::kDestroyId}},
      {false, {E::kConnectRequest, E::kQpReady, E::kEstablished}, {A::kDisconnect, A::kDestroyId}},
  };
  for (const Case& k : cases) {
    Connection c(ConnectPath::kCm, k.higher);
    for (ConnEvent e : k.events) c.on(e);
    const ConnState before = c.state();
    EXPECT_EQ(c.on(E::kClose), k.on_close) << conn_state_name(before);
    EXPECT_EQ(c.state(), S::kClosed);
    EXPECT_EQ(c.on(E::kClose), Actions{});
  }
}

TEST(VerbsConnection, NamesForLogs) {
  EXPECT_STREQ(conn_action_name(A::kModifyQpFromCm), "modify QP (cm)");
  EXPECT_STREQ(conn_event_name(E::kConnectResponse), "connect response");
  EXPECT_STREQ(conn_state_name(S::kAwaitingRequest), "awaiting request");
  EXPECT_STREQ(connect_path_name(ConnectPath::kCm), "rdma_cm");
}

}  // namespace
}  // namespace eagercomm::verbs
