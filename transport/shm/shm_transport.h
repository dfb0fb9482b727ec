// The `shm` backend: ranks are processes on one host, talking through POSIX shared memory.
//
// Each rank creates a control segment (shm_segment.h) holding its EventCount, a sticky "woken"
// word, and one single-producer single-consumer ring of notification tags per sender
// (transport/notify_ring/). local_address() is the control segment's key; connect(peer, address)
// maps the peer's control segment, after which this rank produces into its own ring there.
//
//   allocate(bytes, kHost)  a new zero-filled segment; its remote key names it, and
//                           import_region() maps it (one mapping per segment and importer,
//                           shared by every import of it, unmapped with the last one).
//   allocate(bytes, kCuda), register_memory(p, bytes, kCuda)
//                           device memory whose key carries a CUDA IPC handle; import_region()
//                           opens it (cuda_ipc_region.h). Without a GPU: kUnavailable, naming why.
//   write()                 memcpy into the mapped remote region (cudaMemcpy, waited for, when
//                           either side is device memory), then notify().
//   notify()                pushes the tag on this rank's ring in the peer's control segment
//                           (release), then rings the peer's EventCount. A full ring is kBusy
//                           and delivers nothing.
//   mapped_address()        the local mapping of an imported host region: stores through it
//                           and a following notify() form a write (the mailbox stores
//                           directly). Null for device regions: the CPU cannot store there.
//   poll()                  local write completions (a write completes at once), then tags from
//                           every sender's ring, per-sender FIFO, senders served round-robin.
//   wait() / wake()         the EventCount protocol; thread-safe, wake() is sticky.
//   close()                 marks this rank's control block closed: peers' write() and notify()
//                           to it that start after that fail (kPeerFailed); one already copying
//                           may finish (the segments stay mapped). Stores through
//                           mapped_address() are the peers' own and are not stopped.
//
// Not offered: register_memory() of host memory (memory of one process cannot be mapped by
// another after the fact: kNotSupported; collectives use allocate() memory on this backend), and
// maps_peer_memory() is false (maps_allocations() is true, for host allocations).
//
// Names and cleanup: segments are `/eagercomm-<job>-<scope hash>-<rank>-<n>`, where <job> is
// EAGERCOMM_JOB_ID (sanitized to [A-Za-z0-9_-]) or, when that is empty, a random id that rank 0
// publishes in the store under `<scope>/shm/job`. A rank unlinks each segment it created when
// its region is destroyed and every remaining one when the transport is destroyed; peers'
// mappings stay valid after an unlink. A stale object under a name being created (a crashed
// run with the same job id) is unlinked and creation retried. After a crash, the launcher
// removes /dev/shm/eagercomm-<job>-*; a peer that finds a rank dead removes that rank's
// segments, then its beacon; and when nobody was left to (the launcher was killed with its
// ranks), rank 0 of the next shm job removes the objects of ranks whose liveness beacon is free
// (shm_reclaim.h).
//
// Trust: everything a peer can write (ring indices, control block, segment headers, keys) is
// checked before use. A peer that corrupts its rings is reported (notify(): kProtocolError;
// poll(): a kPeerError completion for that sender, whose ring is then ignored) and nothing
// outside the mapped segments is ever touched. A device key's region must lie inside the
// allocation its CUDA IPC handle opens, as the driver reports that allocation here. A peer that
// dies leaves its mappings valid: this rank's ring towards it fills up (kBusy) and detecting the
// death is the heartbeat's job.
//
// Thread-safety: as the contract (transport.h): one driver at a time; wait() and wake() from
// any thread. Regions and remote regions may be destroyed on any thread, also after the
// transport.
#pragma once

#include <memory>

#include "runtime/status.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace eagercomm {

// Errors: kInvalidArgument for missing store/config, a rank outside [0, size), or a job id
// too long for segment names; kIoError / kNoMemory when the control segment cannot be
// created; kTimeout when the job id must come from rank 0 and does not.
Result<std::unique_ptr<Transport>> create_shm_transport(const TransportParams& params);

// Ring entries per sender for a mailbox of `slots` slots per peer: room for every slot's data
// notification and credit plus control traffic, so kBusy only shows up under abuse.
uint32_t shm_ring_capacity_for(uint32_t slots);

}  // namespace eagercomm
