// Internal: what a Communicator holds (Communicator::Impl), the launch paths' constructor and the
// check of per-call timeouts. Not installed: the public header names Impl only, so that users
// build against the API alone and the engine can change without touching them.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace eagercomm {

namespace detail {
class DeviceStaging;
}  // namespace detail

namespace detail {
// An object that goes on over the survivors after a shrink (a PartialAllreduce with
// on_failure=continue): registered with its communicator, so that whichever of them meets the
// failure first takes all of them over together (collectives/partial/partial_recovery.cc).
struct ContinuingObject {
  virtual ~ContinuingObject() = default;
  // The communicator is being destroyed before the object: it fails from now on, as by default.
  virtual void communicator_gone() = 0;
};
}  // namespace detail

struct Communicator::Impl {
  explicit Impl(std::shared_ptr<detail::CommCore> engine);
  ~Impl();

  // For eagercomm's own code that works on a communicator's engine (PartialAllreduce::create).
  static Impl& of(Communicator& comm) { return *comm.impl_; }

  // Queues `op` (its precheck error, if any, still travels to the peers).
  Result<Request> submit(std::shared_ptr<detail::Op> op);
  // Blocking calls: run `op` to the end, or abandon it at the timeout (CommCore::abandon).
  Status run_blocking(std::shared_ptr<detail::Op> op, std::chrono::nanoseconds timeout);
  Status finish_blocking(Request& req, std::chrono::nanoseconds timeout);
  // The builders of the host collectives that device staging also runs.
  std::shared_ptr<detail::Op> make_broadcast_op(void* buf, size_t count, DataType type, int root);
  std::shared_ptr<detail::Op> make_allgather_op(const void* send, void* recv, size_t count,
                                                DataType type);
  // GPU buffers: the staging object, made on the first device buffer (never in host-only
  // programs), on the device of the first device buffer among send and recv.
  Result<detail::DeviceStaging*> device_staging(const void* send, const void* recv);
  // A Request that is already complete (device collectives run to the end when started).
  Result<Request> completed_request(Status status);

  std::shared_ptr<detail::CommCore> core;
  // Bootstrap resources this communicator keeps (from_env, communicator_from_mpi): the store
  // client and, on the rank that serves it, the store server.
  std::unique_ptr<Store> store;
  std::shared_ptr<void> store_server;
  // The operation object blocking small allreduces reuse, and who is rearming it.
  std::shared_ptr<detail::Op> spare_small;
  std::atomic<bool> spare_busy{false};
  std::mutex device_mu;
  std::unique_ptr<detail::DeviceStaging> device;
  // What shrink() rebuilds from (communicator_shrink.cc): the store the communicator joined
  // through (`store`, make_inproc_world's `shared_store` or the caller's), its scope, and how
  // often it was rebuilt.
  Store* bootstrap = nullptr;
  std::shared_ptr<Store> shared_store;
  std::string scope;
  bool in_process = false;
  uint32_t generation = 0;    // shrinks that rebuilt it
  uint32_t shrink_calls = 0;  // shrink() calls that reached the store: each agrees under its own
                              // keys, so a call after one that failed agrees afresh
  std::string shrink_prefix;  // the store keys of the latest shrink that rebuilt it
  std::vector<int> members;   // the latest shrink's members: their ranks before it
  std::vector<detail::ContinuingObject*> continuing;  // in creation order (the same everywhere)
  // abort() runs on any thread, shrink() replaces `core`: the replacement and abort's read of
  // it are under abort_mu, and an abort while a shrink runs reaches the new engine too.
  std::mutex abort_mu;
  std::optional<std::string> aborted;  // abort()'s reason
};

// Joins through `store` (kept by the communicator) as Communicator::create() does; `server` (may
// be null) is kept alive with it. For launch paths that set up their own store (from_env,
// communicator_from_mpi, the C API's ec_comm_from_store).
Result<std::unique_ptr<Communicator>> communicator_from_store(std::unique_ptr<Store> store,
                                                              std::shared_ptr<void> server,
                                                              int rank, int size,
                                                              const CommunicatorOptions& options);

namespace detail {

// A per-call timeout as the public calls take it (communicator.h, "Timeouts"): positive durations
// and kConfiguredTimeout as they are, -1ns as kWaitForever, any other negative value refused
// with kInvalidArgument naming the spellings (`what`: the call, for the message).
Result<std::chrono::nanoseconds> check_timeout(std::chrono::nanoseconds timeout, const char* what);

}  // namespace detail
}  // namespace eagercomm
