// eagercomm-bench built without Gloo (CMake found no GlooConfig.cmake).
#include "bench/baselines.h"

namespace eagercomm::bench {

Result<Baseline> make_gloo_baseline(Communicator&) {
  return Status(StatusCode::kUnavailable,
                "eagercomm-bench was built without Gloo (and MPI, which hosts the comparison): "
                "install libgloo-dev and libopenmpi-dev (deploy/install-deps.sh) and reconfigure");
}

}  // namespace eagercomm::bench
