#include "python/torch/process_group.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include "collectives/config.h"
#include "python/py_interrupt.h"
#include "python/torch/store_adapter.h"
#include "python/torch/tensor_checks.h"
#include "runtime/deadline.h"

namespace eagercomm::torchext {
namespace {

constexpr const char* kSupported =
    "supported: allreduce (sum, min, max), broadcast, allgather, _allgather_base, barrier";

[[noreturn]] void unsupported(const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "eagercomm backend: ", op, " is not supported (", kSupported,
                              ")");
  std::abort();  // not reached: TORCH_CHECK_NOT_IMPLEMENTED(false) throws
}

// Everything the communicator needs to stay valid, destroyed in reverse order: the communicator
// first, then the store adapter it bootstrapped through, then the c10d store.
struct CommBundle {
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<C10dStoreAdapter> adapter;
  Config config;
  std::unique_ptr<Communicator> comm;
};

ReduceOp to_reduce_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    case c10d::ReduceOp::PRODUCT:
      TORCH_CHECK_VALUE(false,
                        "eagercomm backend: allreduce: ReduceOp.PRODUCT is not supported "
                        "(eagercomm reduces with SUM, MIN and MAX)");
    default:
      TORCH_CHECK_VALUE(false, "eagercomm backend: allreduce: reduce op #",
                        static_cast<int>(op.op_),
                        " is not supported (eagercomm reduces with SUM, MIN and MAX)");
  }
  std::abort();
}

}  // namespace

// A collective in flight. Completed by the WorkQueue thread (or at once when starting failed).
class EagercommWork final : public c10d::Work {
 public:
  EagercommWork(std::shared_ptr<Communicator> comm, int rank, c10d::OpType type, const char* name,
                std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        comm_(std::move(comm)),
        name_(name),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // `timeout` 0 (kNoTimeout): until completion; the group's timeout still applies, through the
  // queue. Throws the collective's error. Waits in slices, looking for signals between them
  // (torch's binding calls this without the GIL): Ctrl-C raises KeyboardInterrupt and aborts
  // the communicator, as the group's timeout does (the collective could otherwise still write
  // into tensors the caller reuses).
  bool wait(std::chrono::milliseconds timeout) override {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point deadline = timeout == kNoTimeout ? kForever : deadline_in(timeout);
    signals::Interrupt interrupt;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        const Clock::time_point now = Clock::now();
        const Clock::time_point until = deadline - now > signals::kSignalCheckEvery
                                            ? now + signals::kSignalCheckEvery
                                            : deadline;
        if (cv_.wait_until(lock, until, [&] { return completed_; })) break;
        if (Clock::now() >= deadline) {
          TORCH_CHECK(false, "eagercomm backend: ", name_, " did not complete within ",
                      timeout.count(), " ms (Work.wait timeout)");
        }
      }
      // Without the Work's lock: the check takes the GIL, which a completion callback holding
      // that lock may be waiting for.
      if (interrupt.check()) {
        comm_->abort("eagercomm backend: " + name_ + " was interrupted on rank " +
                     std::to_string(rank_) + " (" + interrupt.status().message() + ")");
        interrupt.rethrow();
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) {
      // A signal that came meanwhile is raised now (pending, it would break the traceback
      // printing of this error).
      if (interrupt.check()) interrupt.rethrow();
      std::rethrow_exception(exception_);
    }
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Temporaries the collective reads or writes, and what copies results back into the caller's
  // tensors (non-contiguous outputs, allgather's list). Set before the collective starts.
  std::vector<at::Tensor> temporaries;
  std::function<void()> copy_back;

  void complete(const Status& status) {
    std::exception_ptr error;
    if (status.ok()) {
      try {
        if (copy_back) copy_back();
      } catch (...) {
        error = std::current_exception();
      }
    } else {
      error = std::make_exception_ptr(
          std::runtime_error("eagercomm backend: " + name_ + " failed: " + status.to_string()));
    }
    temporaries.clear();
    copy_back = nullptr;
    finish(error);
    // After finish(): a callback chained on the future (DDP's reducer) sees a completed Work.
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<Communicator> comm_;
  std::string name_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

namespace {

// `t` itself when it is contiguous; otherwise a contiguous copy that `work` keeps alive and
// copies back into `t` when the collective has finished.
at::Tensor contiguous_for(const at::Tensor& t, EagercommWork& work) {
  if (t.is_contiguous()) return t;
  at::Tensor buf = t.contiguous();
  work.temporaries.push_back(buf);
  auto previous = std::move(work.copy_back);
  work.copy_back = [previous, t, buf]() mutable {
    if (previous) previous();
    t.copy_(buf);
  };
  return buf;
}

}  // namespace

// Completes collectives in start order on one thread (see process_group.h).
class WorkQueue {
 public:
  WorkQueue(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout)
      : comm_(std::move(comm)), timeout_(timeout), thread_([this] { run(); }) {}

  // Completes what is queued (each bounded by the timeout), then stops.
  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void push(Request request, c10::intrusive_ptr<EagercommWork> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back({std::move(request), std::move(work)});
    }
    cv_.notify_one();
  }

 private:
  struct Item {
    Request request;
    c10::intrusive_ptr<EagercommWork> work;
  };

  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
        if (items_.empty()) return;
        item = std::move(items_.front());
        items_.pop_front();
      }
      Status s = timeout_.count() > 0 ? item.request.wait(timeout_) : item.request.wait();
      if (s.code() == StatusCode::kTimeout) {
        const std::string why = s.message();  // names the ranks that had not arrived
        s = make_status(StatusCode::kTimeout,
                        "%s did not complete within the process group's timeout (%lld ms); the "
                        "communicator has been aborted: %s",
                        item.work->name().c_str(), static_cast<long long>(timeout_.count()),
                        why.c_str());
        // Fails what is pending (no abandoned collective writes later) and tells the peers.
        comm_->abort(s.message());
      }
      item.work->complete(s);
    }
  }

  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

c10::intrusive_ptr<ProcessGroupEagercomm> ProcessGroupEagercomm::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(store, "eagercomm backend: no store");
  TORCH_CHECK_VALUE(size >= 1, "eagercomm backend: world size ", size, " must be at least 1");
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "eagercomm backend: rank ", rank, " is not in [0, ",
                    size, ")");
  // The one timeout rule (communicator.h): 0 is EAGERCOMM_TIMEOUT, -1 no limit; torch itself
  // always passes its positive default.
  TORCH_CHECK_VALUE(timeout.count() >= -1, "eagercomm backend: timeout ", timeout.count(),
                    " ms is negative (0: EAGERCOMM_TIMEOUT, -1: no limit)");
  auto bundle = std::make_shared<CommBundle>();
  bundle->store = store;
  bundle->adapter = std::make_unique<C10dStoreAdapter>(store, "eagercomm/");

  Result<Config> base = effective_config({});
  TORCH_CHECK_VALUE(base.ok(), "eagercomm backend: ", base.status().to_string());
  bundle->config = base.value();
  if (timeout.count() > 0) bundle->config.timeout = timeout;
  if (timeout.count() == -1) bundle->config.timeout = kWaitForever;

  // Each group needs a scope of its own: shared-memory segment names derive from the job id and
  // the scope, and a job (one EAGERCOMM_JOB_ID) may hold several groups. Rank 0 draws it.
  std::string scope;
  if (rank == 0) {
    std::random_device rd;
    const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    char text[32];
    std::snprintf(text, sizeof text, "torch-%016llx", static_cast<unsigned long long>(id));
    scope = text;
    Status s = bundle->adapter->set("scope", to_bytes(scope));
    TORCH_CHECK(s.ok(),
                "eagercomm backend: rank 0 could not publish the group's scope: ", s.to_string());
  } else {
    Result<Bytes> got = bundle->adapter->get("scope", bundle->config.timeout);
    TORCH_CHECK(got.ok(), "eagercomm backend: rank ", rank, " of ", size,
                " did not hear from rank 0: ", got.status().to_string());
    scope = to_string(got.value());
  }

  CommunicatorOptions options;
  options.config = &bundle->config;
  options.scope = scope;
  Result<std::unique_ptr<Communicator>> comm =
      Communicator::create(*bundle->adapter, rank, size, options);
  TORCH_CHECK(comm.ok(), "eagercomm backend: rank ", rank, " of ", size,
              " could not join: ", comm.status().to_string());
  bundle->comm = std::move(comm).value();
  std::shared_ptr<Communicator> shared(bundle, bundle->comm.get());
  return c10::make_intrusive<ProcessGroupEagercomm>(std::move(shared), rank, size, timeout);
}

ProcessGroupEagercomm::ProcessGroupEagercomm(std::shared_ptr<Communicator> comm, int rank, int size,
                                             std::chrono::milliseconds timeout)
    : BackendBase(rank, size),
      comm_(std::move(comm)),
      timeout_(timeout),
      queue_(std::make_unique<WorkQueue>(comm_, timeout)) {}

ProcessGroupEagercomm::~ProcessGroupEagercomm() = default;

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::submit(
    Result<Request> request, c10::intrusive_ptr<EagercommWork> work) {
  if (!request.ok()) {
    // Bad arguments eagercomm found itself, or a communicator already aborted: fail now.
    TORCH_CHECK(false, "eagercomm backend: ", work->name(), ": ", request.status().to_string());
  }
  queue_->push(std::move(request).value(), work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  check_one_tensor(tensors, "allreduce");
  at::Tensor& t = tensors[0];
  const DataType type = check_tensor(t, "allreduce");
  const ReduceOp op = to_reduce_op(opts.reduceOp);
  auto work = c10::make_intrusive<EagercommWork>(comm_, rank_, c10d::OpType::ALLREDUCE, "allreduce",
                                                 tensors);
  at::Tensor buf = contiguous_for(t, *work);
  void* p = buf.data_ptr();
  return submit(comm_->allreduce_async(p, p, static_cast<size_t>(buf.numel()), type, op),
                std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  check_one_tensor(tensors, "broadcast");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                    "eagercomm backend: broadcast: "
                    "root rank ",
                    opts.rootRank, " is not in [0, ", size_, ")");
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "eagercomm backend: broadcast: root tensor index ",
                    opts.rootTensor, " (one tensor per process)");
  at::Tensor& t = tensors[0];
  const DataType type = check_tensor(t, "broadcast");
  auto work = c10::make_intrusive<EagercommWork>(comm_, rank_, c10d::OpType::BROADCAST, "broadcast",
                                                 tensors);
  at::Tensor buf = contiguous_for(t, *work);
  return submit(comm_->broadcast_async(buf.data_ptr(), static_cast<size_t>(buf.numel()), type,
                                       static_cast<int>(opts.rootRank)),
                std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  check_one_tensor(inputs, "allgather");
  TORCH_CHECK_VALUE(outputs.size() == 1,
                    "eagercomm backend: allgather takes one output list "
                    "per process, got ",
                    outputs.size());
  const at::Tensor& in = inputs[0];
  const DataType type = check_tensor(in, "allgather");
  std::vector<at::Tensor>& outs = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == size_,
                    "eagercomm backend: allgather: the "
                    "output list has ",
                    outs.size(), " tensors; the group has ", size_, " ranks");
  for (size_t i = 0; i < outs.size(); ++i) {
    check_tensor(outs[i], "allgather");
    TORCH_CHECK_TYPE(outs[i].scalar_type() == in.scalar_type(),
                     "eagercomm backend: allgather: "
                     "output ",
                     i, " is ", outs[i].scalar_type(), ", the input ", in.scalar_type());
    TORCH_CHECK_VALUE(outs[i].numel() == in.numel(), "eagercomm backend: allgather: output ", i,
                      " has ", outs[i].numel(), " elements, the input ", in.numel());
  }
  auto work =
      c10::make_intrusive<EagercommWork>(comm_, rank_, c10d::OpType::ALLGATHER, "allgather", outs);
  // Gather into one flat buffer, then copy each rank's slice out: the output tensors are
  // separate allocations, and eagercomm's allgather writes one contiguous buffer.
  const int64_t n = in.numel();
  at::Tensor send = in.contiguous();
  at::Tensor flat =
      at::empty({n * size_}, in.options().memory_format(at::MemoryFormat::Contiguous));
  work->temporaries = {send, flat};
  work->copy_back = [outs, flat, n]() mutable {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(outs[i].sizes()));
    }
  };
  return submit(
      comm_->allgather_async(send.data_ptr(), flat.data_ptr(), static_cast<size_t>(n), type),
      std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  const DataType type = check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(),
                   "eagercomm backend: "
                   "_allgather_base: output is ",
                   output.scalar_type(), ", the input ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * size_,
                    "eagercomm backend: "
                    "_allgather_base: output has ",
                    output.numel(), " elements; it needs ", input.numel(), " x ", size_, " ranks");
  auto work =
      c10::make_intrusive<EagercommWork>(comm_, rank_, c10d::OpType::_ALLGATHER_BASE,
                                         "_allgather_base", std::vector<at::Tensor>{output});
  at::Tensor send = input.contiguous();
  work->temporaries.push_back(send);
  at::Tensor recv = contiguous_for(output, *work);
  return submit(comm_->allgather_async(send.data_ptr(), recv.data_ptr(),
                                       static_cast<size_t>(input.numel()), type),
                std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::barrier(const c10d::BarrierOptions&) {
  auto work = c10::make_intrusive<EagercommWork>(comm_, rank_, c10d::OpType::BARRIER, "barrier",
                                                 std::vector<at::Tensor>{});
  return submit(comm_->barrier_async(), std::move(work));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::allreduce_coalesced(
    std::vector<at::Tensor>&, const c10d::AllreduceCoalescedOptions&) {
  unsupported("allreduce_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::reduce(std::vector<at::Tensor>&,
                                                             const c10d::ReduceOptions&) {
  unsupported("reduce");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
    const c10d::AllgatherOptions&) {
  unsupported("allgather_coalesced");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::gather(std::vector<std::vector<at::Tensor>>&,
                                                             std::vector<at::Tensor>&,
                                                             const c10d::GatherOptions&) {
  unsupported("gather");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::scatter(std::vector<at::Tensor>&,
                                                              std::vector<std::vector<at::Tensor>>&,
                                                              const c10d::ScatterOptions&) {
  unsupported("scatter");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::reduce_scatter(
    std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
    const c10d::ReduceScatterOptions&) {
  unsupported("reduce_scatter");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::_reduce_scatter_base(
    at::Tensor&, at::Tensor&, const c10d::ReduceScatterOptions&) {
  unsupported("_reduce_scatter_base");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::alltoall_base(at::Tensor&, at::Tensor&,
                                                                    std::vector<int64_t>&,
                                                                    std::vector<int64_t>&,
                                                                    const c10d::AllToAllOptions&) {
  unsupported("alltoall_base");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::alltoall(std::vector<at::Tensor>&,
                                                               std::vector<at::Tensor>&,
                                                               const c10d::AllToAllOptions&) {
  unsupported("alltoall");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::send(std::vector<at::Tensor>&, int, int) {
  unsupported("send");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::recv(std::vector<at::Tensor>&, int, int) {
  unsupported("recv");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupEagercomm::recvAnysource(std::vector<at::Tensor>&, int) {
  unsupported("recv (any source)");
}
void ProcessGroupEagercomm::monitoredBarrier(const c10d::BarrierOptions&, bool) {
  unsupported("monitored_barrier");
}

}  // namespace eagercomm::torchext
