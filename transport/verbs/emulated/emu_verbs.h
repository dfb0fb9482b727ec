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
// Not emulated yet: rdma_cm (the table has no cm functions, so queue pairs connect through the
// store), GIDs beyond one IB entry, fault injection, device memory the CPU cannot read.
#pragma once

#include "transport/verbs/verbs_api.h"

namespace eagercomm::verbs {

// The emulated device's table (source "emulated"). Always available.
const VerbsApi& emulated_verbs_api();

}  // namespace eagercomm::verbs
