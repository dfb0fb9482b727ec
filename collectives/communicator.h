// The public entry point: a Communicator is one rank's handle on a group of ranks, offering
// non-blocking collectives (start -> Request -> test / wait) and blocking wrappers.
//
//   auto world = eagercomm::make_inproc_world(4);            // 4 ranks as threads
//   // on rank r's thread:
//   eagercomm::Communicator& comm = *world.value()[r];
//   std::vector<float> grad(1 << 20, 1.0f);
//   eagercomm::Status s = comm.allreduce(grad.data(), grad.data(), grad.size(),
//                                        eagercomm::DataType::kFloat32,
//                                        eagercomm::ReduceOp::kSum);  // in place
//
// Rules, as in MPI and NCCL: every rank calls the same collectives in the same order with
// matching arguments (count, type, operator, root). When they do not, every rank's call fails
// with kMismatch and a message naming the rank and both argument lists; no buffer is written
// with wrong data. Several collectives may be in flight at once; they complete independently.
// Buffers must stay valid and unmodified (inputs) until the request completes.
//
// Timeouts: every blocking call takes a last argument `timeout`; the C API (timeout_ms) and the
// Python module (timeout, in seconds) spell it the same way:
//   kConfiguredTimeout (0), the default   EAGERCOMM_TIMEOUT (300 s unless set)
//   kWaitForever                          no limit
//   a positive duration                   that limit (one too long for the clock: no limit)
//   -1ns                                  an alias of kWaitForever (the C API's -1 of old)
//   any other negative duration           refused with kInvalidArgument
// When a blocking collective times out it is abandoned on every rank (the peers' calls fail with
// this rank's report rather than waiting for it; a peer that already holds all of this rank's
// data, as with small allreduces, may still complete it), its buffers are free to reuse, and the
// kTimeout error names the ranks that had not started it and those that went silent, as of their
// last heartbeats (EAGERCOMM_HEARTBEAT; a rank hears from its O(log P) data partners, so beyond
// P = 5 each rank's report names the late ones among its partners). Request::wait(timeout) on the
// other hand only stops waiting: the operation keeps running.
//
// Failures: a peer that dies (its process ends, the transport loses it) or hangs (nothing heard
// from it for EAGERCOMM_TIMEOUT: stopped, deadlocked, unreachable) fails every pending and later
// operation that needs it with kPeerFailed naming it. A peer that is only slow (alive, its
// heartbeats arrive) is waited for until the call's timeout. The survivors may then go on
// without it: shrink() below.
//
// Threading: a Communicator may be used from several threads, but the order of collective
// calls must be the same on every rank, which is only well defined when one thread calls them
// (or the threads order their calls). wait() drives progress on the calling thread; with
// EAGERCOMM_PROGRESS_THREAD=on a background thread also drives it, so requests progress while
// the application computes.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/config.h"
#include "collectives/dtype.h"
#include "runtime/memory.h"
#include "runtime/status.h"
#include "runtime/store.h"

namespace eagercomm {

namespace detail {
class CommCore;
class Op;
}  // namespace detail

class Request;

struct CommunicatorOptions {
  // Configuration to use; null means the process configuration (EAGERCOMM_* variables).
  const Config* config = nullptr;
  // Prefix of this communicator's keys in the store (several communicators may share one).
  std::string scope = "eagercomm";
  // Every rank is a thread of this process (make_inproc_world sets it): EAGERCOMM_TRANSPORT=auto
  // then means inproc.
  bool in_process = false;
};

struct CommunicatorStats {
  uint64_t ops_started = 0;
  uint64_t ops_failed = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t spills = 0;          // messages copied out of a mailbox slot to keep a peer going
  uint64_t deferred_sends = 0;  // sends retried after transport back-pressure
  uint64_t unexpected_messages = 0;
  uint64_t engine_blocks = 0;  // times a driver went to sleep waiting for peers
  // What this rank holds for its peers: `connected_peers` counts the transport connections it
  // has now. Transports other than verbs connect on first use, so a rank holds connections to
  // the peers it has exchanged messages with: O(log size()) for the collectives and partial
  // rounds (their data partners), more once control notices went to others (a signature probe,
  // a quorum's arrival at its coordinator); verbs connects every pair at creation (size() - 1).
  // Its registered mailbox keeps EAGERCOMM_SLOTS x EAGERCOMM_SLOT_BYTES for the
  // ring neighbours, half as many slots for the other peers its algorithms send data to
  // (`data_peers`, O(log size())), and 4 slots of 1 KiB for every other rank (control messages);
  // twice that where the transport cannot store into the peers' memory (ucx between hosts,
  // verbs). Ranks of one process (inproc) keep full slots for every peer. `eagercomm-info` shows
  // the figures for larger jobs.
  uint32_t connected_peers = 0;
  uint32_t data_peers = 0;
  // Ranks this rank knows to be gone (left, failed or declared hung): told directly, by a
  // verdict or down the exit tree, or found by its transport.
  uint32_t peers_gone = 0;
  uint64_t mailbox_bytes = 0;
};

class Communicator {
 public:
  // Joins the group of `size` ranks that bootstrap through `store`, as `rank`. Blocks until
  // every rank has joined or EAGERCOMM_TIMEOUT passes (the error names the missing ranks).
  static Result<std::unique_ptr<Communicator>> create(Store& store, int rank, int size,
                                                      const CommunicatorOptions& options = {});
  // Joins the job this process was started in: eagercomm-run, mpirun (with
  // EAGERCOMM_MASTER_ADDR), srun or torchrun (runtime/launch_env.h says what each provides).
  // The rank that serves the bootstrap store (rank 0 outside eagercomm-run) starts it and keeps
  // it until destroy(). Store keys are scoped by the job id.
  static Result<std::unique_ptr<Communicator>> from_env(const CommunicatorOptions& options = {});
  ~Communicator();  // destroy()
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // The transport in use ("inproc", ...).
  const std::string& transport_name() const;
  // What kConfiguredTimeout stands for in this communicator's calls (EAGERCOMM_TIMEOUT, or the
  // configuration it was made with): a positive duration, or kWaitForever.
  std::chrono::nanoseconds configured_timeout() const;

  // recv = op over ranks of send, elementwise. send == recv is in place. Buffers of
  // `count` elements; any count, including 0.
  //
  // CUDA device buffers (allreduce, broadcast, allgather; docs/RDMA_AND_GPU.md, "GPU buffers in
  // collectives"): any buffer may be device memory, detected per call when the process has a
  // GPU; all of one call's device buffers on one device, the same device in every call of this
  // communicator (else kInvalidArgument). Such calls are staged through pinned host memory and
  // reduced by CUDA kernels on a stream of this communicator; the _async forms run them to the
  // end before returning (the Request is already complete). Every rank must pass device memory
  // to a given allreduce or none may (else it fails with kMismatch); broadcast and allgather mix
  // freely. A device buffer where this process cannot use CUDA is refused (kUnavailable), never
  // read as host memory.
  // Stream order (the forms with a CudaStream, as in NCCL): the call reads and writes device
  // buffers after all the work enqueued on `stream` before it (the kernel that computed the
  // gradient, a cudaMemcpyAsync), and its results are complete when it returns: later work on
  // any stream sees them. The forms without one use the legacy default stream, which orders the
  // call after work on blocking streams but not after the application's non-blocking streams.
  Result<Request> allreduce_async(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, CudaStream stream);
  Result<Request> allreduce_async(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op);
  Status allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                   CudaStream stream, std::chrono::nanoseconds timeout = kConfiguredTimeout);
  Status allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                   std::chrono::nanoseconds timeout = kConfiguredTimeout);

  // buf on every rank = buf on `root`.
  Result<Request> broadcast_async(void* buf, size_t count, DataType type, int root,
                                  CudaStream stream);
  Result<Request> broadcast_async(void* buf, size_t count, DataType type, int root);
  Status broadcast(void* buf, size_t count, DataType type, int root, CudaStream stream,
                   std::chrono::nanoseconds timeout = kConfiguredTimeout);
  Status broadcast(void* buf, size_t count, DataType type, int root,
                   std::chrono::nanoseconds timeout = kConfiguredTimeout);

  // recv (size * count elements) = the concatenation of every rank's send (count elements),
  // in rank order. send == recv + rank * count (in bytes of type) is in place.
  Result<Request> allgather_async(const void* send, void* recv, size_t count, DataType type,
                                  CudaStream stream);
  Result<Request> allgather_async(const void* send, void* recv, size_t count, DataType type);
  Status allgather(const void* send, void* recv, size_t count, DataType type, CudaStream stream,
                   std::chrono::nanoseconds timeout = kConfiguredTimeout);
  Status allgather(const void* send, void* recv, size_t count, DataType type,
                   std::chrono::nanoseconds timeout = kConfiguredTimeout);

  Result<Request> barrier_async();
  Status barrier(std::chrono::nanoseconds timeout = kConfiguredTimeout);

  // Fails every pending request with kAborted, tells the peers (their collectives that need
  // this rank fail with kPeerFailed instead of hanging) and releases the transport. Later
  // calls return kAborted. Idempotent; the destructor calls it.
  void destroy();
  // destroy() from any thread, for a reason: threads blocked in this communicator's calls
  // return at once with kAborted carrying `reason`, later calls fail the same way, and the
  // peers' operations in flight fail with kPeerFailed quoting it. For watchdogs and signal-free
  // shutdown paths (not async-signal-safe). Idempotent.
  void abort(const std::string& reason = "");

  // Continuing after a failure (docs/RELIABILITY.md, "Shrinking"): collective over the ranks
  // still alive, called after an operation failed with kPeerFailed (or whenever the application
  // decides to drop ranks that are gone). The callers agree on one membership: the ranks that
  // call shrink() (a rank any caller knows to be gone is not waited for, and a rank that does
  // not call within `timeout` is left out). The communicator is then rebuilt in place over
  // the members, renumbered in their old order: rank() and size() change, operations still
  // pending on the old group fail with kAborted, later calls run over the new group. Returns the
  // members' former ranks (index: new rank). A rank that was left out gets kPeerFailed, and its
  // communicator stays failed. Needs the bootstrap store the communicator was made through
  // (create(): the caller's store must still exist then; from_env: the launcher's or rank 0's
  // store, so a rank 0 that served the store cannot be survived outside eagercomm-run). Not
  // concurrently with other calls on this communicator except abort(): an abort while it runs
  // ends it with kAborted once the new group is made (the store's waits are not interrupted),
  // and the new group is aborted too; after an abort it fails at once. A shrink that fails
  // (a member died during it: the error names it) leaves the communicator stopped; calling
  // shrink() again agrees afresh among the ranks that do.
  Result<std::vector<int>> shrink(std::chrono::nanoseconds timeout = kConfiguredTimeout);
  // How many times shrink() has rebuilt this communicator (failed shrinks do not count).
  uint32_t generation() const;
  // The members' ranks before the latest shrink (index: their rank now); 0 .. size() - 1 before
  // any. (What an application needs to take over a dead rank's share of work.)
  std::vector<int> former_ranks() const;
  // Counters, read consistently with the engine.
  CommunicatorStats stats() const;

  // The bootstrap store this communicator joined through and owns (from_env,
  // communicator_from_mpi); null
  // for create() (the caller owns that store) and make_inproc_world(). Embedding frameworks may
  // rendezvous through it under their own key prefix (keys under options.scope are ours).
  Store* bootstrap_store() const;

  // What a communicator holds (collectives/communicator_impl.h, not installed). Declared here so
  // that eagercomm's own code (partial allreduce, the launch paths) reaches it without friends.
  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A collective in flight. Copyable; all copies refer to the same operation. A default-built
// Request is invalid (test/wait return kInvalidArgument).
class Request {
 public:
  Request() = default;
  bool valid() const { return op_ != nullptr; }
  // True once the operation has finished (successfully or not). Does not drive progress: with
  // no progress thread, only test() or wait() move the operation forward.
  bool ready() const;
  // kOk when finished successfully, kInProgress while running, otherwise the error. Makes one
  // progress pass when no other thread is driving.
  Status test();
  // Blocks until the operation finishes (its Status) or `timeout` passes (kTimeout; the
  // operation keeps running and may be waited for again). `timeout` as for every blocking call
  // (see "Timeouts" above).
  Status wait(std::chrono::nanoseconds timeout);
  // wait(kConfiguredTimeout).
  Status wait();
  // Gives up on the operation as a blocking collective does at its timeout: fails it on every
  // rank (the peers' calls fail with this rank's report instead of waiting for it), waits until
  // no peer uses its buffers, and returns the timeout error naming the ranks that had not
  // started it, as of `waited`. Its status if it had already finished. For callers that wait in
  // slices of their own (the Python module looks for Ctrl-C between them).
  Status abandon(std::chrono::nanoseconds waited);

 private:
  friend struct Communicator::Impl;
  Request(std::shared_ptr<detail::Op> op, std::shared_ptr<detail::CommCore> core)
      : op_(std::move(op)), core_(std::move(core)) {}
  std::shared_ptr<detail::Op> op_;
  std::shared_ptr<detail::CommCore> core_;
};

// The configuration a communicator made with `options` uses: options.config, else the
// process's EAGERCOMM_* table (whose error, if it has one, is returned).
Result<Config> effective_config(const CommunicatorOptions& options);

// Creates `size` communicators connected to each other in this process (ranks as threads),
// through an in-memory store. Rank r's communicator is element r. Each communicator may then
// be used from its own thread.
Result<std::vector<std::unique_ptr<Communicator>>> make_inproc_world(
    int size, const CommunicatorOptions& options = {});

}  // namespace eagercomm
