#include "collectives/communicator.h"

#include <atomic>
#include <optional>
#include <thread>

#include "collectives/algorithms/algorithms.h"
#include "collectives/collective_log.h"
#include "collectives/communicator_impl.h"
#include "collectives/cuda/cuda_reduce.h"
#include "collectives/device/device_collectives.h"
#include "collectives/device/device_routing.h"
#include "collectives/engine/comm_core.h"
#include "runtime/deadline.h"
#include "runtime/gpu.h"
#include "runtime/job_bootstrap.h"

namespace eagercomm {

using detail::Algo;
using detail::CollKind;
using detail::OpSignature;

namespace {

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

// Checks what every collective with a typed buffer needs; returns the buffer's bytes.
Result<size_t> check_buffer(const char* what, const void* ptr, size_t count, DataType type,
                            int rank) {
  if (!is_valid_dtype(static_cast<uint32_t>(type))) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s on rank %d: data type %u is not a DataType", what, rank,
                       static_cast<unsigned>(type));
  }
  const size_t es = dtype_size(type);
  if (count > SIZE_MAX / es / 2) {
    return make_status(StatusCode::kInvalidArgument, "%s on rank %d: count %zu is too large", what,
                       rank, count);
  }
  if (ptr == nullptr && count > 0) {
    return make_status(StatusCode::kInvalidArgument, "%s on rank %d: null buffer with count %zu",
                       what, rank, count);
  }
  return count * es;
}

// kHost unless a buffer is device memory (asked of the driver, which creates no context: a
// host-only program never initialises the CUDA runtime). A device buffer in a process that cannot
// use CUDA is refused here rather than handed to the host path.
Result<detail::DevicePath> device_route(const char* what, const void* send, const void* recv,
                                        DataType type, std::optional<ReduceOp> op) {
  const MemoryKind send_kind = gpu::detected_kind(send);
  const MemoryKind recv_kind = send == recv ? send_kind : gpu::detected_kind(recv);
  if (send_kind == MemoryKind::kHost && recv_kind == MemoryKind::kHost) {
    return detail::DevicePath::kHost;
  }
  EC_RETURN_IF_ERROR(gpu::check_usable(what));
  return detail::choose_device_path(what, send_kind, recv_kind, type, op, cuda::reduce_built());
}

// The operation behind a Request whose work already ran on the caller's thread.
class CompletedOp final : public detail::Op {
 public:
  explicit CompletedOp(Status status) : Op(detail::OpSignature{}) { complete(std::move(status)); }
  Status start(detail::OpContext&) override { return Status::Ok(); }
  Status on_message(detail::OpContext&, const detail::Received&) override { return Status::Ok(); }
  Result<int> advance(detail::OpContext&) override { return 0; }
  bool finished() const override { return true; }
  void drop_held(detail::OpContext&) override {}
};

}  // namespace

namespace detail {

// The host collectives DeviceStaging runs on its pinned buffers: those of the communicator, with
// this rank's local failure, if any, sent to every rank as the operation's precheck error.
class StagingHost final : public HostCollectives {
 public:
  StagingHost(Communicator::Impl& comm, std::chrono::nanoseconds timeout)
      : comm_(comm), timeout_(timeout) {}
  int rank() const override { return comm_.core->rank(); }
  int size() const override { return comm_.core->size(); }
  Status allgather(const void* send, void* recv, size_t count, DataType type,
                   const Status& local_error) override {
    std::shared_ptr<Op> op = comm_.make_allgather_op(send, recv, count, type);
    if (!local_error.ok()) op->precheck_error = local_error;
    return finish(std::move(op));
  }
  Status broadcast(void* buf, size_t count, DataType type, int root,
                   const Status& local_error) override {
    std::shared_ptr<Op> op = comm_.make_broadcast_op(buf, count, type, root);
    if (!local_error.ok()) op->precheck_error = local_error;
    return finish(std::move(op));
  }

 private:
  Status finish(std::shared_ptr<Op> op) {
    Result<Request> req = comm_.submit(std::move(op));
    if (!req.ok()) return req.status();
    return comm_.finish_blocking(req.value(), timeout_);
  }
  Communicator::Impl& comm_;
  std::chrono::nanoseconds timeout_;
};

}  // namespace detail

// ---- Timeouts ----

namespace detail {

Result<std::chrono::nanoseconds> check_timeout(std::chrono::nanoseconds timeout, const char* what) {
  if (timeout >= std::chrono::nanoseconds::zero()) return timeout;
  if (timeout == std::chrono::nanoseconds(-1)) return kWaitForever;
  return make_status(StatusCode::kInvalidArgument,
                     "%s: timeout %lldns is negative (kWaitForever: no limit, "
                     "kConfiguredTimeout: EAGERCOMM_TIMEOUT)",
                     what, static_cast<long long>(timeout.count()));
}

}  // namespace detail

// ---- Request ----

bool Request::ready() const { return op_ && op_->done(); }

Status Request::test() {
  if (!op_) return Status(StatusCode::kInvalidArgument, "test() on an empty Request");
  log_set_thread_rank(core_->rank());  // it may drive the engine, as wait() does
  if (!op_->done()) core_->engine().try_progress();
  return op_->done() ? op_->status() : in_progress();
}

Status Request::wait(std::chrono::nanoseconds timeout) {
  if (!op_) return Status(StatusCode::kInvalidArgument, "wait() on an empty Request");
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "Request::wait"));
  log_set_thread_rank(core_->rank());
  detail::Op* op = op_.get();
  timeout = core_->resolve(timeout);
  if (!core_->engine().wait([op] { return op->done(); }, deadline_after(timeout))) {
    return core_->timed_out(*op, timeout);
  }
  return op->status();
}

Status Request::wait() {
  if (!op_) return Status(StatusCode::kInvalidArgument, "wait() on an empty Request");
  return wait(kConfiguredTimeout);
}

Status Request::abandon(std::chrono::nanoseconds waited) {
  if (!op_) return Status(StatusCode::kInvalidArgument, "abandon() on an empty Request");
  if (op_->done()) return op_->status();
  log_set_thread_rank(core_->rank());
  return core_->abandon(*op_, waited);
}

// ---- Communicator ----

Communicator::Impl::Impl(std::shared_ptr<detail::CommCore> engine) : core(std::move(engine)) {}

Communicator::Impl::~Impl() {
  for (detail::ContinuingObject* o : continuing) o->communicator_gone();
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() { destroy(); }

Result<std::unique_ptr<Communicator>> Communicator::create(Store& store, int rank, int size,
                                                           const CommunicatorOptions& options) {
  const Config* config = options.config;
  if (config == nullptr) {
    const Result<Config>& process = Config::process();
    if (!process.ok()) return process.status();
    config = &process.value();
  }
  log_set_thread_rank(rank);
  EC_ASSIGN_OR_RETURN(
      std::shared_ptr<detail::CommCore> core,
      detail::CommCore::create(store, options.scope, rank, size, *config, options.in_process));
  auto impl = std::make_unique<Impl>(std::move(core));
  impl->bootstrap = &store;
  impl->scope = options.scope;
  impl->in_process = options.in_process;
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> communicator_from_store(std::unique_ptr<Store> store,
                                                              std::shared_ptr<void> server,
                                                              int rank, int size,
                                                              const CommunicatorOptions& options) {
  EC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                      Communicator::create(*store, rank, size, options));
  Communicator::Impl& impl = Communicator::Impl::of(*comm);
  impl.store = std::move(store);
  impl.store_server = std::move(server);
  return comm;
}

Result<Config> effective_config(const CommunicatorOptions& options) {
  if (options.config != nullptr) return *options.config;
  const Result<Config>& process = Config::process();
  if (!process.ok()) return process.status();
  return process.value();
}

Result<std::unique_ptr<Communicator>> Communicator::from_env(const CommunicatorOptions& options) {
  EC_ASSIGN_OR_RETURN(Config config, effective_config(options));
  EC_ASSIGN_OR_RETURN(JobBootstrap job, join_job(config));
  log_set_thread_rank(job.info.rank);
  // Transports name shared resources after the job (shm segments), so they see the job id.
  config.job_id = job.info.job_id;
  CommunicatorOptions opts = options;
  opts.config = &config;
  opts.scope = options.scope + "/" + job.info.job_id;
  return communicator_from_store(std::move(job.store), std::move(job.server), job.info.rank,
                                 job.info.size, opts);
}

int Communicator::rank() const { return impl_->core->rank(); }
int Communicator::size() const { return impl_->core->size(); }
const std::string& Communicator::transport_name() const { return impl_->core->transport_name(); }
std::chrono::nanoseconds Communicator::configured_timeout() const {
  // EAGERCOMM_TIMEOUT=0 is the variable's own spelling of "no limit".
  const std::chrono::nanoseconds configured = impl_->core->config().timeout;
  return configured > std::chrono::nanoseconds::zero() ? configured : kWaitForever;
}

Store* Communicator::bootstrap_store() const { return impl_->store.get(); }

void Communicator::destroy() {
  if (impl_->core) impl_->core->destroy();
}

void Communicator::abort(const std::string& reason) {
  std::shared_ptr<detail::CommCore> core;
  {
    std::lock_guard lock(impl_->abort_mu);
    impl_->aborted = reason;
    core = impl_->core;
  }
  if (core) core->abort(reason);
}

Result<Request> Communicator::Impl::submit(std::shared_ptr<detail::Op> op) {
  log_set_thread_rank(core->rank());
  if (core->destroyed()) return core->closed_status();
  const Status precheck = op->precheck_error;
  core->submit(op);
  if (!precheck.ok()) {
    // The operation still takes its place in the sequence so that the peers learn about the
    // failure instead of waiting for this rank; push the notice out now.
    core->engine().try_progress();
    return precheck;
  }
  return Request(std::move(op), core);
}

namespace {

// The signature (algorithm included) of an allreduce call, and in *error what is wrong with its
// arguments on this rank.
OpSignature allreduce_signature(const detail::CommCore& core, const void* send, const void* recv,
                                size_t count, DataType type, ReduceOp op, Status* error) {
  const int rank = core.rank();
  OpSignature sig;
  sig.coll = static_cast<uint8_t>(CollKind::kAllreduce);
  sig.dtype = static_cast<uint8_t>(type);
  sig.redop = static_cast<uint8_t>(op);
  sig.count = count;
  Status precheck;
  Result<size_t> bytes = check_buffer("allreduce", send, count, type, rank);
  if (bytes.ok()) bytes = check_buffer("allreduce", recv, count, type, rank);
  if (!bytes.ok()) {
    precheck = bytes.status();
  } else if (!is_valid_reduce_op(static_cast<uint32_t>(op))) {
    precheck = make_status(StatusCode::kInvalidArgument,
                           "allreduce on rank %d: reduction operator %u is not a ReduceOp", rank,
                           static_cast<unsigned>(op));
  } else if (send != recv && overlaps(send, *bytes, recv, *bytes)) {
    precheck =
        make_status(StatusCode::kInvalidArgument,
                    "allreduce on rank %d: send and receive buffers partially overlap", rank);
  }
  *error = precheck;
  const size_t n = bytes.ok() ? *bytes : 0;
  sig.reserved = static_cast<uint8_t>(
      detail::choose_allreduce(core.config(), core.size(), n, core.payload_capacity(),
                               core.maps_peer_memory(), core.small_max_bytes()));
  return sig;
}

}  // namespace

Result<Request> Communicator::allreduce_async(const void* send, void* recv, size_t count,
                                              DataType type, ReduceOp op) {
  return allreduce_async(send, recv, count, type, op, CudaStream{});
}

Result<Request> Communicator::allreduce_async(const void* send, void* recv, size_t count,
                                              DataType type, ReduceOp op, CudaStream stream) {
  EC_ASSIGN_OR_RETURN(detail::DevicePath path, device_route("allreduce", send, recv, type, op));
  if (path == detail::DevicePath::kStaged) {
    return impl_->completed_request(
        allreduce(send, recv, count, type, op, stream, kConfiguredTimeout));
  }
  Status precheck;
  const OpSignature sig = allreduce_signature(*impl_->core, send, recv, count, type, op, &precheck);
  std::shared_ptr<detail::Op> o = detail::make_allreduce(sig, send, recv);
  o->precheck_error = precheck;
  return impl_->submit(std::move(o));
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                               ReduceOp op, std::chrono::nanoseconds timeout) {
  return allreduce(send, recv, count, type, op, CudaStream{}, timeout);
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                               ReduceOp op, CudaStream stream, std::chrono::nanoseconds timeout) {
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "allreduce"));
  EC_ASSIGN_OR_RETURN(detail::DevicePath path, device_route("allreduce", send, recv, type, op));
  Impl& impl = *impl_;
  detail::CommCore& core = *impl.core;
  if (path == detail::DevicePath::kStaged) {
    if (core.destroyed()) return core.closed_status();
    detail::StagingHost host(impl, timeout);
    Result<detail::DeviceStaging*> staging = impl.device_staging(send, recv);
    // A failure here is this rank's before the call: the peers' calls fail with it too.
    if (!staging.ok()) return host.allgather(nullptr, nullptr, count, type, staging.status());
    return (*staging)->allreduce(host, send, recv, count, type, op, stream.handle);
  }
  Status precheck;
  const OpSignature sig = allreduce_signature(core, send, recv, count, type, op, &precheck);
  if (!precheck.ok() || sig.reserved != static_cast<uint8_t>(Algo::kSmall)) {
    std::shared_ptr<detail::Op> o = detail::make_allreduce(sig, send, recv);
    o->precheck_error = precheck;
    return impl.run_blocking(std::move(o), timeout);
  }
  // The latency path: a small blocking call reuses one operation object (no allocation) and
  // begins and drives it on this thread (no submission queue, no wake-up of another driver).
  log_set_thread_rank(core.rank());
  if (core.destroyed()) return core.closed_status();
  std::shared_ptr<detail::Op> o;
  if (!impl.spare_busy.exchange(true, std::memory_order_acquire)) {
    if (impl.spare_small && impl.spare_small.use_count() == 1) {
      detail::rearm_small_allreduce(*impl.spare_small, sig, send, recv);
    } else {
      impl.spare_small = detail::make_small_allreduce(sig, send, recv);
    }
    o = impl.spare_small;
    impl.spare_busy.store(false, std::memory_order_release);
  } else {
    o = detail::make_small_allreduce(sig, send, recv);  // another thread holds the spare
  }
  return core.run_inline(std::move(o), timeout);
}

Result<Request> Communicator::broadcast_async(void* buf, size_t count, DataType type, int root) {
  return broadcast_async(buf, count, type, root, CudaStream{});
}

Result<Request> Communicator::broadcast_async(void* buf, size_t count, DataType type, int root,
                                              CudaStream stream) {
  EC_ASSIGN_OR_RETURN(detail::DevicePath path,
                      device_route("broadcast", buf, buf, type, std::nullopt));
  if (path == detail::DevicePath::kStaged) {
    return impl_->completed_request(broadcast(buf, count, type, root, stream, kConfiguredTimeout));
  }
  return impl_->submit(impl_->make_broadcast_op(buf, count, type, root));
}

std::shared_ptr<detail::Op> Communicator::Impl::make_broadcast_op(void* buf, size_t count,
                                                                  DataType type, int root) {
  const int rank = core->rank(), size = core->size();
  OpSignature sig;
  sig.coll = static_cast<uint8_t>(CollKind::kBroadcast);
  sig.dtype = static_cast<uint8_t>(type);
  sig.root = root;
  sig.count = count;
  Status precheck;
  Result<size_t> bytes = check_buffer("broadcast", buf, count, type, rank);
  if (!bytes.ok()) {
    precheck = bytes.status();
  } else if (root < 0 || root >= size) {
    precheck = make_status(StatusCode::kInvalidArgument,
                           "broadcast on rank %d: root %d is not a rank of this communicator "
                           "(size %d)",
                           rank, root, size);
    sig.root = 0;  // keep the tree well formed; the failure still reaches every rank
  }
  const Config& cfg = core->config();
  bool chain = bytes.ok() && *bytes >= cfg.chain_min_bytes;
  if (cfg.bcast_algo == BroadcastAlgo::kChain) chain = true;
  if (cfg.bcast_algo == BroadcastAlgo::kTree) chain = false;
  sig.reserved = static_cast<uint8_t>(chain ? Algo::kChain : Algo::kTree);
  auto o = detail::make_broadcast(sig, buf);
  o->precheck_error = precheck;
  return o;
}

Status Communicator::broadcast(void* buf, size_t count, DataType type, int root,
                               std::chrono::nanoseconds timeout) {
  return broadcast(buf, count, type, root, CudaStream{}, timeout);
}

Status Communicator::broadcast(void* buf, size_t count, DataType type, int root, CudaStream stream,
                               std::chrono::nanoseconds timeout) {
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "broadcast"));
  EC_ASSIGN_OR_RETURN(detail::DevicePath path,
                      device_route("broadcast", buf, buf, type, std::nullopt));
  Impl& impl = *impl_;
  if (path == detail::DevicePath::kStaged) {
    if (impl.core->destroyed()) return impl.core->closed_status();
    detail::StagingHost host(impl, timeout);
    Result<detail::DeviceStaging*> staging = impl.device_staging(buf, buf);
    if (!staging.ok()) return host.broadcast(nullptr, count, type, root, staging.status());
    return (*staging)->broadcast(host, buf, count, type, root, stream.handle);
  }
  EC_ASSIGN_OR_RETURN(Request req, impl.submit(impl.make_broadcast_op(buf, count, type, root)));
  return impl.finish_blocking(req, timeout);
}

Result<Request> Communicator::allgather_async(const void* send, void* recv, size_t count,
                                              DataType type) {
  return allgather_async(send, recv, count, type, CudaStream{});
}

Result<Request> Communicator::allgather_async(const void* send, void* recv, size_t count,
                                              DataType type, CudaStream stream) {
  EC_ASSIGN_OR_RETURN(detail::DevicePath path,
                      device_route("allgather", send, recv, type, std::nullopt));
  if (path == detail::DevicePath::kStaged) {
    return impl_->completed_request(allgather(send, recv, count, type, stream, kConfiguredTimeout));
  }
  return impl_->submit(impl_->make_allgather_op(send, recv, count, type));
}

std::shared_ptr<detail::Op> Communicator::Impl::make_allgather_op(const void* send, void* recv,
                                                                  size_t count, DataType type) {
  const int rank = core->rank(), size = core->size();
  OpSignature sig;
  sig.coll = static_cast<uint8_t>(CollKind::kAllgather);
  sig.dtype = static_cast<uint8_t>(type);
  sig.count = count;
  sig.reserved = static_cast<uint8_t>(Algo::kRing);
  Status precheck;
  Result<size_t> bytes = check_buffer("allgather", send, count, type, rank);
  if (bytes.ok() && count > SIZE_MAX / dtype_size(type) / 2 / static_cast<size_t>(size)) {
    bytes = make_status(StatusCode::kInvalidArgument,
                        "allgather on rank %d: count %zu is too large", rank, count);
  }
  if (bytes.ok()) bytes = check_buffer("allgather", recv, count * size, type, rank);
  if (!bytes.ok()) {
    precheck = bytes.status();
  } else {
    const size_t block = *bytes / size;
    const uint8_t* in_place = static_cast<const uint8_t*>(recv) + block * rank;
    if (send != in_place && overlaps(send, block, recv, *bytes)) {
      precheck = make_status(StatusCode::kInvalidArgument,
                             "allgather on rank %d: the send buffer overlaps the receive buffer "
                             "but is not this rank's block of it",
                             rank);
    }
  }
  auto o = detail::make_ring_allgather(sig, send, recv);
  o->precheck_error = precheck;
  return o;
}

Status Communicator::allgather(const void* send, void* recv, size_t count, DataType type,
                               std::chrono::nanoseconds timeout) {
  return allgather(send, recv, count, type, CudaStream{}, timeout);
}

Status Communicator::allgather(const void* send, void* recv, size_t count, DataType type,
                               CudaStream stream, std::chrono::nanoseconds timeout) {
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "allgather"));
  EC_ASSIGN_OR_RETURN(detail::DevicePath path,
                      device_route("allgather", send, recv, type, std::nullopt));
  Impl& impl = *impl_;
  if (path == detail::DevicePath::kStaged) {
    if (impl.core->destroyed()) return impl.core->closed_status();
    detail::StagingHost host(impl, timeout);
    Result<detail::DeviceStaging*> staging = impl.device_staging(send, recv);
    if (!staging.ok()) return host.allgather(nullptr, nullptr, count, type, staging.status());
    return (*staging)->allgather(host, send, recv, count, type, stream.handle);
  }
  EC_ASSIGN_OR_RETURN(Request req, impl.submit(impl.make_allgather_op(send, recv, count, type)));
  return impl.finish_blocking(req, timeout);
}

Result<Request> Communicator::barrier_async() {
  OpSignature sig;
  sig.coll = static_cast<uint8_t>(CollKind::kBarrier);
  sig.reserved = static_cast<uint8_t>(Algo::kDissemination);
  return impl_->submit(detail::make_barrier(sig));
}

Status Communicator::barrier(std::chrono::nanoseconds timeout) {
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "barrier"));
  EC_ASSIGN_OR_RETURN(Request req, barrier_async());
  return impl_->finish_blocking(req, timeout);
}

Status Communicator::Impl::run_blocking(std::shared_ptr<detail::Op> op,
                                        std::chrono::nanoseconds timeout) {
  log_set_thread_rank(core->rank());
  return core->run(std::move(op), detail::CommCore::WakeDriver::kYes, timeout);
}

Status Communicator::Impl::finish_blocking(Request& req, std::chrono::nanoseconds timeout) {
  timeout = core->resolve(timeout);
  Status s = req.wait(timeout);
  if (s.code() != StatusCode::kTimeout || req.ready()) return s;
  // A blocking call returns only when the operation no longer uses the caller's buffers.
  return core->abandon(*req.op_, timeout);
}

Result<detail::DeviceStaging*> Communicator::Impl::device_staging(const void* send,
                                                                  const void* recv) {
  std::lock_guard<std::mutex> lock(device_mu);
  if (!device) {
    // On the device of the first device buffer (not the caller's current device, which may be
    // another); DeviceStaging checks every later call's buffers against it.
    Result<int> device_id = gpu::device_of(send);
    if (!device_id.ok()) device_id = gpu::device_of(recv);
    EC_RETURN_IF_ERROR(device_id.status());
    EC_ASSIGN_OR_RETURN(device, detail::DeviceStaging::create(*device_id));
  }
  return device.get();
}

Result<Request> Communicator::Impl::completed_request(Status status) {
  if (!status.ok()) return status;
  return Request(std::make_shared<CompletedOp>(std::move(status)), core);
}

CommunicatorStats Communicator::stats() const {
  const detail::CommCore& core = *impl_->core;
  const detail::CoreStats counters = core.stats();
  const MailboxStats mail = core.mailbox_stats();
  CommunicatorStats out;
  out.ops_started = counters.ops_started;
  out.ops_failed = counters.ops_failed;
  out.messages_sent = mail.sent;
  out.messages_received = mail.received;
  out.spills = mail.spills;
  out.deferred_sends = mail.deferred;
  out.unexpected_messages = counters.unexpected_messages;
  out.engine_blocks = impl_->core->engine().stats().blocks;
  out.connected_peers = mail.connected_peers;
  out.data_peers = mail.data_peers;
  out.mailbox_bytes = mail.registered_bytes;
  out.peers_gone = static_cast<uint32_t>(impl_->core->gone_peers().size());
  return out;
}

// ---- In-process world ----

Result<std::vector<std::unique_ptr<Communicator>>> make_inproc_world(
    int size, const CommunicatorOptions& options) {
  if (size < 1) {
    return make_status(StatusCode::kInvalidArgument, "in-process world of %d ranks", size);
  }
  static std::atomic<uint64_t> worlds{0};
  CommunicatorOptions opts = options;
  opts.scope = options.scope + "/world" + std::to_string(worlds.fetch_add(1));
  opts.in_process = true;
  // Shared by the ranks and kept by them: shrink() bootstraps the survivors through it.
  auto shared = std::make_shared<HashStore>();
  HashStore& store = *shared;
  std::vector<Result<std::unique_ptr<Communicator>>> results;
  results.reserve(size);
  for (int r = 0; r < size; ++r) results.emplace_back(Status(StatusCode::kInternal, "not created"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { results[r] = Communicator::create(store, r, size, opts); });
  }
  for (auto& t : threads) t.join();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    comms.push_back(std::move(r).value());
    Communicator::Impl::of(*comms.back()).shared_store = shared;
  }
  return comms;
}

}  // namespace eagercomm
