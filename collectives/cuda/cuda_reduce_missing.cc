// cuda::reduce() in builds without the CUDA toolkit: says so.
#include "collectives/cuda/cuda_reduce.h"

namespace eagercomm::cuda {

bool reduce_built() { return false; }

Status reduce(DataType, ReduceOp, void*, const void*, const void*, size_t, void*) {
  return Status(StatusCode::kNotSupported,
                "cuda reduce: this build has no CUDA (install the CUDA toolkit and reconfigure "
                "with EAGERCOMM_WITH_CUDA=ON)");
}

}  // namespace eagercomm::cuda
