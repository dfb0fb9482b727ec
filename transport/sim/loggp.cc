#include "transport/sim/loggp.h"

#include <cstdio>

namespace eagercomm::sim {

std::string LogGP::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "L=%.0fns o=%.0fns g=%.0fns G=%.4fns/B (%.1f GB/s) reduce=%.3fns/B", L_ns, o_ns,
                g_ns, G_ns_per_byte, 1.0 / G_ns_per_byte, reduce_ns_per_byte);
  return buf;
}

Result<LogGP> loggp_preset(std::string_view name) {
  if (name == "hdr") return LogGP{1000, 200, 5, 0.04, 0.1};
  if (name == "ndr") return LogGP{900, 150, 3, 0.02, 0.1};
  return make_status(StatusCode::kInvalidArgument, "unknown link preset '%.*s' (known: hdr, ndr)",
                     static_cast<int>(name.size()), name.data());
}

}  // namespace eagercomm::sim
