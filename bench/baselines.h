// Other libraries' allreduce, run by eagercomm-bench on the same processes and buffers as
// eagercomm's (--compare mpi,gloo,nccl), and the MPI job that hosts MPI's and Gloo's. Each is
// built in when CMake found its library (NCCL: nccl.h and libnccl in the CUDA toolkit);
// otherwise its factory says so with kUnavailable.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace eagercomm::bench {

// One library's blocking allreduce over the job's ranks.
struct Baseline {
  std::string name;         // "mpi", "gloo", "nccl"
  std::string description;  // version / algorithm, for the report header
  std::function<Status(const void* send, void* recv, size_t count, DataType type, ReduceOp op)>
      allreduce;
  std::shared_ptr<void> state;  // what the library needs alive (a Gloo context, ...)
};

// True when this process was started by mpirun / a PMIx launcher (its variables are set).
bool started_by_mpi_launcher();
// MPI_Init_thread (funneled: only the main thread calls MPI). kUnavailable without MPI.
Status mpi_start(int* argc, char*** argv);
// MPI_Finalize, when mpi_start() succeeded.
void mpi_stop();
// eagercomm's communicator over MPI_COMM_WORLD (communicator_from_mpi).
Result<std::unique_ptr<Communicator>> communicator_over_mpi();
// MPI_Barrier on MPI_COMM_WORLD: the common start line of every timed call in --compare.
Status mpi_barrier();
// Element-wise max / sum of doubles over MPI_COMM_WORLD, in place.
Status mpi_allreduce_doubles(double* values, size_t count, bool max);

// The baselines named in `names` ("mpi", "gloo", "nccl"), created collectively on every rank of
// the job; `comm`'s bootstrap store carries Gloo's rendezvous, `comm` itself NCCL's unique id.
// kInvalidArgument for an unknown name, kUnavailable for a library this binary was built without.
Result<std::vector<Baseline>> make_baselines(const std::vector<std::string>& names,
                                             Communicator& comm);

// The factories make_baselines() dispatches to (baseline_<name>.cc, or the _missing.cc
// variant when the library was not found at configure time).
Result<Baseline> make_mpi_baseline();
Result<Baseline> make_gloo_baseline(Communicator& comm);
// One NCCL communicator over the ranks of `comm` on this process's current GPU, one stream;
// its allreduce takes device buffers and returns once the stream is done.
Result<Baseline> make_nccl_baseline(Communicator& comm);

}  // namespace eagercomm::bench
