// The `inproc` backend: ranks are threads of one process.
//
// A one-sided write is a memcpy into the peer's registered memory followed by a notification
// pushed onto the peer's lock-free queue with release ordering; the peer's poll() pops it with
// acquire ordering, so the data is visible before the tag is. Peers' memory is directly
// addressable, so mapped_address() lets the runtime store straight into a peer's mailbox.
//
// The ranks of one communicator share a fabric (queues, event counts, allocated blocks). Rank 0
// creates it and publishes its id through the bootstrap store; the others look it up in this
// process. Memory a rank allocated stays alive while any peer still holds an imported region of
// it, so a late write into a destroyed rank's mailbox never touches freed memory.
//
// close() (also by destruction): peers' write() and notify() to the rank that start after it
// fail (kPeerFailed); one already copying may finish, into memory that stays alive; stores
// through mapped_address() are the peers' own and are not stopped.
//
// CUDA memory (allocate / register_memory with MemoryKind::kCuda, when this process has a GPU):
// the ranks share one address space, so a peer's device pointer is used as it is (no CUDA IPC);
// write() copies with cudaMemcpy, finished before the notification, whenever either side is
// device memory. mapped_address() is null for device regions (the CPU cannot load or store
// there), so maps_peer_memory() holds for host regions only. Without a GPU, kCuda is
// kUnavailable (kNotSupported in builds without CUDA), naming why.
#pragma once

#include <memory>

#include "runtime/status.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace eagercomm {

Result<std::unique_ptr<Transport>> create_inproc_transport(const TransportParams& params);

}  // namespace eagercomm
