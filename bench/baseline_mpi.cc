// The MPI side of eagercomm-bench --compare: MPI's lifecycle, its allreduce as a baseline and
// eagercomm's communicator bootstrapped from MPI_COMM_WORLD.
#include <mpi.h>

#include <cstdlib>

#include "bench/baselines.h"
#include "collectives/communicator_mpi.h"

namespace eagercomm::bench {
namespace {

bool g_started = false;

Result<MPI_Datatype> mpi_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    default:
      return make_status(StatusCode::kNotSupported,
                         "MPI has no %s type (MPI-4 lacks 16-bit floats)",
                         std::string(dtype_name(t)).c_str());
  }
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::kSum ? MPI_SUM : op == ReduceOp::kMin ? MPI_MIN : MPI_MAX;
}

Status mpi_failed(const char* what, int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return make_status(StatusCode::kIoError, "%s failed: %s", what, text);
}

}  // namespace

bool started_by_mpi_launcher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

Status mpi_start(int* argc, char*** argv) {
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return mpi_failed("MPI_Init_thread", rc);
  // Errors come back as codes (and become Statuses) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_started = true;
  return Status::Ok();
}

void mpi_stop() {
  if (g_started) MPI_Finalize();
  g_started = false;
}

Result<std::unique_ptr<Communicator>> communicator_over_mpi() {
  return communicator_from_mpi(MPI_COMM_WORLD);
}

Status mpi_barrier() {
  const int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? Status::Ok() : mpi_failed("MPI_Barrier", rc);
}

Status mpi_allreduce_doubles(double* values, size_t count, bool max) {
  const int rc = MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_DOUBLE,
                               max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? Status::Ok() : mpi_failed("MPI_Allreduce", rc);
}

Result<Baseline> make_mpi_baseline() {
  Baseline b;
  b.name = "mpi";
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, static_cast<size_t>(len));
  if (const size_t cut = v.find_first_of(",\n"); cut != v.npos) v.resize(cut);
  b.description = v;
  b.allreduce = [](const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op) -> Status {
    EC_ASSIGN_OR_RETURN(MPI_Datatype t, mpi_type(type));
    if (count > static_cast<size_t>(INT32_MAX)) {
      return Status(StatusCode::kInvalidArgument, "MPI_Allreduce: count over INT_MAX");
    }
    const int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                                 t, mpi_op(op), MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? Status::Ok() : mpi_failed("MPI_Allreduce", rc);
  };
  return b;
}

}  // namespace eagercomm::bench
