// Internal: rdma_cm on the emulated RDMA device (emu_verbs.h). Not installed.
//
// The connection manager's protocol between ranks as threads or processes of one host, over the
// loopback interface (the emulated device's "IPoIB" address is 127.0.0.1): an event channel owns
// a TCP port reserved from the kernel (so it is unique on the host) and a shared-memory inbox
// /eagercomm-vemucm-<uid>-<port> where peers leave CM messages (REQ, REP, RTU, REJ); a listener
// listens on its channel's port. A disconnect request (DREQ) travels in the peer's port ring
// instead, behind the data the disconnecting side sent (a NIC acknowledges that data before the
// peer can disconnect: RC ordering), and the peer sees RDMA_CM_EVENT_DISCONNECTED after those
// completions. Events: ADDR_RESOLVED / ADDR_ERROR, ROUTE_RESOLVED, CONNECT_REQUEST (private data,
// the listener as listen_id), CONNECT_RESPONSE, ESTABLISHED (passive side, after rdma_establish),
// REJECTED, DISCONNECTED (both sides). rdma_init_qp_attr gives what a CM would, including its
// min_rnr_timer of 0 (issue 18, defect 10). Queue-pair numbers carry their port's LID
// (emu_verbs.cc), which is how the CM finds the port of a QP it is given by number.
#pragma once

#include <cstdint>
#include <string>

struct rdma_event_channel;

namespace eagercomm::verbs {
struct VerbsApi;
namespace emu {

// Puts the emulated rdma_cm functions into `api` (has_cm, cm_on_loopback).
void fill_cm_table(VerbsApi& api);
// A CM message that came through a port's ring (the device thread hands it over).
void deliver_cm_packet(const uint8_t* data, uint32_t length);
// The shared-memory name of a channel's inbox ("/eagercomm-vemucm-<uid>-<port>"), for tests.
// A channel removes its own; one left by a killed process goes at the next channel's creation.
std::string inbox_name_of(const rdma_event_channel* channel);

}  // namespace emu
}  // namespace eagercomm::verbs
