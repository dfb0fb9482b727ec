// The `ucx` backend: ranks are processes (one host or many) connected by UCX UCP.
//
// One UCP context and one worker per Transport (features RMA + AM + WAKEUP). A write is a
// ucp_put_nbx of the bytes, then ucp_worker_fence, then a 8-byte active message carrying the
// sender's rank and the 32-bit tag; the target's AM handler queues the tag for its poll(). UCP
// fence semantics order the put before the AM on that endpoint (completed, hence visible,
// before the AM), and AMs on one endpoint arrive in order, so the data is visible when the tag
// is seen and notifications keep per-pair FIFO order. Using an AM (not a put of a flag) makes
// the target's worker event fd fire, so a target asleep in wait() wakes up, and it works where
// UCX emulates puts with messages (UCX_TLS=tcp): the target's progress serves those puts.
//
// Memory:
//   - allocate() maps memory with UCP_MEM_MAP_ALLOCATE: on one host UCX allocates it from a
//     shared-memory segment, peers reach it with ucp_rkey_ptr, and puts into it are plain
//     stores by the sender (truly one-sided). mapped_address() hands out that pointer; stores
//     through it followed by notify() are a write (notify() issues a release fence first).
//   - register_memory() maps caller memory. Over shared memory UCX cannot map it into peers,
//     so a put into it is emulated with messages and needs the target's progress (poll()).
//   - Remote keys (MemoryRegion::remote_key()) are a versioned header (owner rank, transport
//     instance, base address, size, checksum) followed by the packed UCP rkey; import_region()
//     checks all of it before ucp_ep_rkey_unpack, which trusts its input.
//   - MemoryKind::kCuda is passed to UCX as UCS_MEMORY_TYPE_CUDA when the UCX build handles CUDA
//     memory (ucp_context_query lists the type); otherwise refused with kNotSupported
//     (ucx_memory_kind_supported()). Imported GPU regions are never mapped (host stores cannot
//     reach them), and a GPU source is copied into mapped peer memory with cudaMemcpy.
//
// Addresses: local_address() is the UCP worker address behind a header (rank, transport
// instance, checksum). connect() creates the endpoint and never blocks (wire-up completes in
// later poll() calls; operations issued before that are queued by UCP, in order).
//
// Back-pressure: at most UcxTransportOptions::max_outstanding writes and notifications may be
// incomplete (UCX requests not done); beyond that write() and notify() return kBusy and
// nothing is sent. Completing them needs poll() here and, for some transports, the peer's.
//
// Failures: endpoints to peers that may share memory with us (same host and IPC namespace,
// shared-memory transports enabled) use UCP_ERR_HANDLING_MODE_NONE, because UCX 1.13's
// shared-memory transports cannot handle peer failure and asking for it would move the pair
// to TCP; all others use UCP_ERR_HANDLING_MODE_PEER. A lost endpoint or an operation that
// completes with an error marks the peer failed and queues one kPeerError completion; later
// write()/notify() to it return kPeerFailed.
//
// Teardown (bounded by close_timeout): a close handshake first. The closing rank sends a
// goodbye to every peer and waits until each answers (a peer answers from its next poll(); a
// peer that closes too sends its own goodbye). A peer that got the goodbye refuses further
// write()/notify() to the closed rank (kPeerFailed, "rank N has closed its transport") and
// treats the connection's end as expected, not as kPeerError. Then endpoints close (flush, or
// FORCE when nothing is in flight), and whatever is left at the deadline is released. The
// handshake matters over TCP: UCX emulates puts with messages there and the target answers
// each one; UCX 1.13 aborts the target process when such an answer meets a closed connection,
// which the handshake prevents whenever the target polls within close_timeout. Regions and
// imported remotes keep the UCP context and worker alive (shared ownership), so they may
// outlive the transport and be destroyed on any thread.
//
// Thread-safety: the Transport contract. One driver thread at a time calls everything but
// wait() and wake(), which any thread may call concurrently with the driver: the worker runs
// in UCS_THREAD_MODE_MULTI, so the ucp_worker_arm() that wait() needs before sleeping is
// serialized by UCX with the driver's ucp_worker_progress(). See wait() in ucx_wait.cc.
//
// Between network namespaces (UCX_TLS=tcp): UCX lists network devices from /sys/class/net, so
// each process must see its own namespace's sysfs (`ip netns exec` remounts /sys; a bare
// setns(CLONE_NEWNET) leaves only `lo`, which UCX rightly treats as unreachable).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "runtime/status.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace eagercomm {

// Knobs of the ucx backend outside the EAGERCOMM_* table (tests shrink them).
struct UcxTransportOptions {
  // Writes + notifications whose UCX requests are not complete yet; more gives kBusy.
  // 0: max(1024, 4 * size * EAGERCOMM_SLOTS + 256), enough for every peer's mailbox traffic.
  size_t max_outstanding = 0;
  // How long destruction waits for the close handshake and for endpoints to flush and close
  // (peers answer from their poll(), so a peer that does not poll costs this much). Zero or
  // negative: no limit, as every timeout of the runtime (deadline_after(), runtime/deadline.h).
  std::chrono::milliseconds close_timeout{5000};
};

// Creates this rank's endpoint: UCP context + worker, reading UCX_* variables (UCX_TLS,
// UCX_NET_DEVICES, ...) from the environment at this call. params.store is not used (the
// caller exchanges local_address() and remote keys); params.config may be null (defaults).
// Errors: kInvalidArgument for a bad rank/size, kUnavailable when UCX finds no usable
// transport here (the message carries UCX's reason).
// Whether the backend takes memory of `kind` given whether UCX handles CUDA memory: Ok, or
// kNotSupported saying what is missing. Pure (tests/transport/gpu_ucx_test.cc).
Status ucx_memory_kind_supported(MemoryKind kind, bool ucx_has_cuda);

Result<std::unique_ptr<Transport>> create_ucx_transport(const TransportParams& params);
Result<std::unique_ptr<Transport>> create_ucx_transport(const TransportParams& params,
                                                        const UcxTransportOptions& options);

}  // namespace eagercomm
