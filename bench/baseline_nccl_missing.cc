// eagercomm-bench built without NCCL (no CUDA toolkit, or no nccl.h / libnccl beside it).
#include "bench/baselines.h"

namespace eagercomm::bench {

Result<Baseline> make_nccl_baseline(Communicator&) {
  return Status(StatusCode::kUnavailable,
                "--compare nccl: eagercomm-bench was not built with NCCL (CMake found no nccl.h "
                "and libnccl in the CUDA toolkit): install NCCL there (it comes with the CUDA "
                "images) and reconfigure with EAGERCOMM_WITH_CUDA=ON");
}

}  // namespace eagercomm::bench
