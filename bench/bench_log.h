// The benchmarks' log subsystem (runtime/log.h): EC_INFO(kBench, ...). Header only, listed by
// the library's catalogue (collectives/log_subsystems.cc) like sgd's.
#pragma once

#include "collectives/collective_log.h"

namespace eagercomm {
namespace log_subsys {
inline constexpr LogSubsys kBench{8};  // eagercomm-bench and the micro suites
}  // namespace log_subsys

inline constexpr LogSubsysName kBenchLogSubsystems[] = {{log_subsys::kBench, "bench"}};

}  // namespace eagercomm
