// The transport layer's log subsystems (runtime/log.h): EC_WARN(kNet, ...).
#pragma once

#include "runtime/log.h"

namespace eagercomm {
namespace log_subsys {
inline constexpr LogSubsys kNet{1};  // backends, connections, the mailbox, peers' liveness
inline constexpr LogSubsys kMem{5};  // shared segments, registered and imported memory
}  // namespace log_subsys

inline constexpr LogSubsysName kTransportLogSubsystems[] = {{log_subsys::kNet, "net"},
                                                            {log_subsys::kMem, "mem"}};

}  // namespace eagercomm
