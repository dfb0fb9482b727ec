// Creating a Communicator from an MPI communicator (builds with EAGERCOMM_WITH_MPI only; include
// this header only where <mpi.h> is available).
//
//   MPI_Init(&argc, &argv);
//   auto comm = eagercomm::communicator_from_mpi(MPI_COMM_WORLD);
//
// Every rank of `mpi_comm` calls it. Rank 0 serves the bootstrap store (on EAGERCOMM_MASTER_ADDR's
// interface, else every interface, a free port) and broadcasts its address, a fresh job token and
// a job id with MPI; the ranks then join as with Communicator::create(). eagercomm's ranks are
// mpi_comm's ranks. MPI is not used after this call (the two can run side by side).
#pragma once

#include <mpi.h>

#include <memory>

#include "collectives/communicator.h"

namespace eagercomm {

Result<std::unique_ptr<Communicator>> communicator_from_mpi(
    MPI_Comm mpi_comm, const CommunicatorOptions& options = {});

}  // namespace eagercomm
