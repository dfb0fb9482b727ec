#include "bench/baselines.h"

namespace eagercomm::bench {

Result<std::vector<Baseline>> make_baselines(const std::vector<std::string>& names,
                                             Communicator& comm) {
  std::vector<Baseline> out;
  for (const std::string& name : names) {
    if (name == "mpi") {
      EC_ASSIGN_OR_RETURN(Baseline b, make_mpi_baseline());
      out.push_back(std::move(b));
    } else if (name == "gloo") {
      EC_ASSIGN_OR_RETURN(Baseline b, make_gloo_baseline(comm));
      out.push_back(std::move(b));
    } else if (name == "nccl") {
      EC_ASSIGN_OR_RETURN(Baseline b, make_nccl_baseline(comm));
      out.push_back(std::move(b));
    } else {
      return make_status(StatusCode::kInvalidArgument,
                         "--compare: '%s' is not one of mpi, gloo, nccl", name.c_str());
    }
  }
  return out;
}

}  // namespace eagercomm::bench
