// eagercomm-bench built without MPI (CMake did not find it): --compare and --world mpi explain
// how to get it instead of failing obscurely.
#include "bench/baselines.h"

namespace eagercomm::bench {
namespace {

Status no_mpi() {
  return Status(
      StatusCode::kUnavailable,
      "eagercomm-bench was built without MPI: install libopenmpi-dev (deploy/install-deps.sh) "
      "and reconfigure with EAGERCOMM_WITH_MPI=ON");
}

}  // namespace

bool started_by_mpi_launcher() { return false; }
Status mpi_start(int*, char***) { return no_mpi(); }
void mpi_stop() {}
Result<std::unique_ptr<Communicator>> communicator_over_mpi() { return no_mpi(); }
Status mpi_barrier() { return no_mpi(); }
Status mpi_allreduce_doubles(double*, size_t, bool) { return no_mpi(); }
Result<Baseline> make_mpi_baseline() { return no_mpi(); }

}  // namespace eagercomm::bench
