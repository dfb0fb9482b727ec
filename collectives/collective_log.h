// The collectives' log subsystems (runtime/log.h): EC_WARN(kColl, ...).
#pragma once

#include "runtime/log.h"
#include "transport/transport_log.h"  // kNet, kMem: collectives log transport events too

namespace eagercomm {
namespace log_subsys {
inline constexpr LogSubsys kColl{2};     // communicators and their collectives
inline constexpr LogSubsys kPartial{3};  // partial (eager) allreduce
}  // namespace log_subsys

inline constexpr LogSubsysName kCollectiveLogSubsystems[] = {{log_subsys::kColl, "coll"},
                                                             {log_subsys::kPartial, "partial"}};

}  // namespace eagercomm
