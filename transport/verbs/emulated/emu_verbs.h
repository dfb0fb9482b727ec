// Internal: an emulated RDMA device behind the VerbsApi table (verbs_api.h). Not installed.
//
// EAGERCOMM_VERBS_EMULATE=1 hands the verbs transport this table instead of rdma-core's, and the
// real transport code runs on it: ranks as threads of one process or as processes of one host.
// One device, "emu0", with one InfiniBand port; each opened context is a port on the emulated
// fabric (emu_port.h) with a device thread that executes send work requests and places inbound
// packets, asynchronously, as a NIC does. What it enforces, each as the IB specification and
// rdma-core's man pages say:
//   - protection: a write outside a registered region, with a stale or wrong rkey, or without
//     IBV_ACCESS_REMOTE_WRITE completes with IBV_WC_REM_ACCESS_ERR; a bad lkey with
//     IBV_WC_LOC_PROT_ERR; either moves the QP to ERROR;
//   - the RC state machine: modify_qp checks the transitions and their required attributes;
//     packets to a QP not in RTR or RTS are dropped and the requester retries every
//     4.096 us x 2^timeout, retry_cnt times, then completes with IBV_WC_RETRY_EXC_ERR;
//   - RDMA_WRITE_WITH_IMM consumes a posted receive (IBV_WC_RECV_RDMA_WITH_IMM with the
//     immediate and byte_len); without one the responder answers RNR and the requester retries
//     after the responder's min_rnr_timer, rnr_retry times (7: forever), then
//     IBV_WC_RNR_RETRY_EXC_ERR;
//   - inline data is copied by the CPU when posted (as providers do); non-inline data is read by
//     the device when the request executes, through the region's device address;
//   - signaled and unsignaled sends (errors always complete); a QP in ERROR completes every
//     outstanding send and receive with IBV_WC_WR_FLUSH_ERR; destroy_qp discards what did not
//     execute;
//   - CQ capacity (an overrun drops the completion, the CQ reports errors and an
//     IBV_EVENT_CQ_ERR async event is queued); completion channels with a pollable fd and the
//     req_notify_cq / get_cq_event / ack_cq_events rules (one event per arming); async events on
//     the context's async_fd.
//   - device memory the CPU cannot read (emu_device_memory.h), registered and reached by the
//     device through an alias;
//   - ibv_fork_init's rules on a kernel without copy-on-fork for pinned pages (protection is
//     needed, and refused after the first registration);
//   - faults scripted by tests (below): lost packets, added latency, a QP or CQ in error with or
//     without its async event, a port going down and up, a smaller max message size.
//   - rdma_cm over the loopback interface (emu_cm.h).
// Not emulated: GIDs beyond one IB entry, P_Keys beyond index 0, path records, CM timeouts.
#pragma once

#include <chrono>
#include <cstdint>

#include "runtime/status.h"
#include "transport/verbs/verbs_api.h"

namespace eagercomm::verbs {

// The emulated device's table (source "emulated"). Always available.
const VerbsApi& emulated_verbs_api();

namespace emu {

// Faults scripted by tests. They act on this process's contexts: a port by its LID, a queue pair
// by its number (the values the verbs transport publishes in its address: verbs_wire.h). Each
// returns kInvalidArgument when nothing in this process matches.
struct QpRef {
  uint32_t lid = 0;
  uint32_t qpn = 0;  // 0: every QP of the port
};

// The next `packets` sends of the QPs are lost: the requester retries after its ACK timeout and
// completes with IBV_WC_RETRY_EXC_ERR once retry_cnt retries were lost too.
Status inject_drop(QpRef ref, uint32_t packets);
// Every request of the QPs starts `delay` late (0: no delay).
Status inject_delay(QpRef ref, std::chrono::microseconds delay);
// Whether an injected error is also announced as an asynchronous event.
enum class AsyncEvent : uint8_t { kNo, kYes };
// The QPs enter ERROR as after a catastrophic local error: every outstanding request completes
// with IBV_WC_WR_FLUSH_ERR, none with an error of its own; with AsyncEvent::kYes, an
// IBV_EVENT_QP_FATAL is queued first.
Status inject_qp_error(QpRef ref, AsyncEvent event);
// The port's completion queues fail: ibv_poll_cq returns -1 from now on; with AsyncEvent::kYes,
// an IBV_EVENT_CQ_ERR per CQ.
Status inject_cq_error(uint32_t lid, AsyncEvent event);
enum class PortState : uint8_t { kDown, kActive };
// The port goes down (IBV_EVENT_PORT_ERR; nothing is sent or placed, so requests retry) or comes
// back (IBV_EVENT_PORT_ACTIVE).
Status set_port_state(uint32_t lid, PortState state);
// The max_msg_sz of ports opened from now on (2^31 unless set): a longer request completes with
// IBV_WC_LOC_LEN_ERR.
void set_max_message(uint32_t bytes);

// What a QP was given by modify_qp, for tests of the transport's settings, and how many send
// completions it generated (signaled requests, errors and flushes).
struct QpAttributes {
  ibv_qp_state state = IBV_QPS_RESET;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint32_t min_rnr_timer = 0;
  uint8_t sl = 0;
  uint8_t traffic_class = 0;
  ibv_mtu path_mtu = IBV_MTU_256;
  uint16_t pkey_index = 0;
  uint64_t send_completions = 0;
};
Result<QpAttributes> qp_attributes(QpRef ref);

// The queue pair of port `lid` whose path leads to port `remote_lid` (set when it left INIT):
// how tests find a pair connected on demand, whose numbers no address carries.
// kInvalidArgument when there is none.
Result<uint32_t> qp_towards(uint32_t lid, uint32_t remote_lid);
// How many queue pairs port `lid` has (whatever their state).
Result<uint32_t> qp_count(uint32_t lid);

// Back to "fork protection needed and not asked for" (tests of ibv_fork_init handling).
void reset_fork_state();

}  // namespace emu
}  // namespace eagercomm::verbs
