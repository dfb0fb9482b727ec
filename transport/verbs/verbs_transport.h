// The `verbs` backend: ranks on InfiniBand / RoCE hosts connected by libibverbs RC queue pairs.
//
// Data path: write() is one RDMA_WRITE_WITH_IMM whose 32-bit immediate is the notification tag
// (inline for small writes); the target sees the tag in a receive completion of the peer's QP,
// after the data (the RC write and its immediate complete in order at the target). notify() is a
// zero-length RDMA_WRITE_WITH_IMM. Every such message consumes one posted receive at the target,
// so senders hold receive credits (verbs_credits.h): the target reposts each receive as it
// completes and publishes its running count by an RDMA write into the sender's credit word;
// a sender without credit gets kBusy.
//
// Connection set-up (verbs_connect.h): each rank creates one RC QP per peer up front and
// publishes their numbers, PSNs, its LID / GID, its credit words and, when it offers the cm path,
// the IP address and port of its rdma_cm listener in local_address() (verbs_wire.h). connect()
// then takes one of two paths per pair, chosen by EAGERCOMM_IB_CONNECT and what both offer:
//  - rdma_cm: the higher rank resolves the peer's address and route and sends a connect request
//    carrying its QP number; the lower one accepts on its listener. Both move their own QPs to
//    RTR/RTS with the attributes rdma_cm derives (rdma_init_qp_attr). connect() only starts this;
//    poll() drives it, and write()/notify() return kBusy until the pair is up.
//  - store (the fallback, also for devices without an IP address): connect() moves the QP to RTR
//    and RTS with the values the peer published, and the pair is up when connect() returns.
// Small writes go inline (IBV_SEND_INLINE, up to what the device grants, at most 64 bytes).
//
// Device: verbs_device.h chooses device, port and GID from EAGERCOMM_IB_HCA / _IB_PORT /
// _IB_GID_INDEX; create fails with kUnavailable (and the reason) where there is none.
//
// Idle path: wait() arms the completion queue (ibv_req_notify_cq) and sleeps on its completion
// channel and on a wake-up eventfd. A completion that arrived after the driver's last poll and
// before the arm raises no event, so each sleep is bounded by 1 ms (a missed wake-up costs at
// most that; wait() cannot poll the CQ itself, which belongs to the driver).
//
// Memory: allocate() and register_memory() register host memory with ibv_reg_mr (local write,
// remote write). MemoryKind::kCuda is refused with kNotSupported in this build.
//
// Failures: a send completion with an error (retry exceeded: the peer is gone) marks the peer
// failed and queues one kPeerError; later write()/notify() to it return kPeerFailed.
//
// The code: verbs_transport_impl.h names the files the class is spread over and the parts with
// their own state.
//
// Status: compiled and its device-free parts unit-tested (wire formats, credits, device choice);
// it has not run on RDMA hardware yet (the development machine's kernel has no RDMA support).
#pragma once

#include <memory>

#include "runtime/status.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace eagercomm {

// Errors: kUnavailable when there is no usable RDMA port here (the message says why),
// kInvalidArgument for a bad rank / size or a device, port or GID index that does not exist.
Result<std::unique_ptr<Transport>> create_verbs_transport(const TransportParams& params);

}  // namespace eagercomm
