#include "transport/sim/loggp.h"

#include <cstdio>
#include <cstdlib>
#include <string>

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

Result<LogGP> loggp_parse(std::string_view spec) {
  if (spec.find('=') == std::string_view::npos) return loggp_preset(spec);
  auto bad = [&](const char* why) {
    return make_status(StatusCode::kInvalidArgument,
                       "link '%.*s': %s (a preset, hdr or ndr, or "
                       "L=NS,o=NS,g=NS,bw=GBPS[,reduce=GBPS])",
                       static_cast<int>(spec.size()), spec.data(), why);
  };
  LogGP m;
  unsigned seen = 0;
  size_t at = 0;
  while (at <= spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string_view::npos) end = spec.size();
    const std::string item(spec.substr(at, end - at));
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("an item without '='");
    const std::string key = item.substr(0, eq);
    char* stop = nullptr;
    const double v = std::strtod(item.c_str() + eq + 1, &stop);
    if (stop == item.c_str() + eq + 1 || *stop != '\0' || !(v >= 0)) {
      return bad("a value that is not a number >= 0");
    }
    if (key == "L") {
      m.L_ns = v, seen |= 1;
    } else if (key == "o") {
      m.o_ns = v, seen |= 2;
    } else if (key == "g") {
      m.g_ns = v, seen |= 4;
    } else if (key == "bw" && v > 0) {
      m.G_ns_per_byte = 1.0 / v, seen |= 8;
    } else if (key == "reduce" && v > 0) {
      m.reduce_ns_per_byte = 1.0 / v;
    } else {
      return bad("an unknown key, or a bandwidth of 0");
    }
    at = end + 1;
  }
  if (seen != 15) return bad("L, o, g and bw are all required");
  return m;
}

}  // namespace eagercomm::sim
