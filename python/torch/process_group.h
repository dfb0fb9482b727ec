// The "eagercomm" torch.distributed backend: a c10d process group whose collectives run on an
// eagercomm Communicator bootstrapped through the c10d store init_process_group made.
//
// Supported: allreduce (sum, min, max), broadcast, allgather, _allgather_base, barrier, on dense
// CPU tensors of float32, float64, float16, bfloat16, int32 and int64, one tensor per call.
// Everything else raises NotImplementedError "eagercomm backend: <op> is not supported".
//
// Asynchrony: a collective is started on the calling thread (so every rank starts its
// collectives in program order, which the communicator requires) and handed to the group's
// completion thread, which waits for it in start order and completes the Work and its Future
// (DDP's reducer and comm hooks chain on the Future). Non-contiguous tensors are copied to
// contiguous temporaries and copied back before the Work completes.
//
// Timeout: the group's timeout (init_process_group(timeout=...)) bounds the bootstrap and every
// collective. A collective that runs past it fails with a timeout error and the communicator is
// aborted (later collectives fail at once), as NCCL's watchdog does: an abandoned collective
// could otherwise still write into tensors the caller reuses.
//
// torch 1.x backends derive from c10d::ProcessGroup, torch 2.x ones from c10d::Backend (the
// ProcessGroup there dispatches to per-device backends); only the 1.13 path has been built and
// tested here.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace eagercomm::torchext {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

class WorkQueue;
class EagercommWork;

class ProcessGroupEagercomm final : public BackendBase {
 public:
  // What torch.distributed's creator function gets: the group's (prefixed) store, this
  // process's rank in the group, the group's size and timeout. Blocks until every rank joined;
  // throws (naming the rank and the cause) when one does not within `timeout`.
  static c10::intrusive_ptr<ProcessGroupEagercomm> create(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout);

  ProcessGroupEagercomm(std::shared_ptr<Communicator> comm, int rank, int size,
                        std::chrono::milliseconds timeout);
  ~ProcessGroupEagercomm() override;

  const std::string getBackendName() const override { return "eagercomm"; }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // Not supported: each raises NotImplementedError naming the operation.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // The communicator under this group, shared with eagercomm.torch.EagerSGD and the DDP hook
  // state (it outlives the group while they hold it).
  const std::shared_ptr<Communicator>& communicator() const { return comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  c10::intrusive_ptr<c10d::Work> submit(Result<Request> request,
                                        c10::intrusive_ptr<EagercommWork> work);

  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<WorkQueue> queue_;
};

}  // namespace eagercomm::torchext
