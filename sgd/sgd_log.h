// The training layer's log subsystem (runtime/log.h): EC_INFO(kSgd, ...). Header only: the
// library's catalogue (collectives/log_subsystems.cc) lists it, so EAGERCOMM_LOG_SUBSYS=sgd is
// checked by every program, trainer or not.
#pragma once

#include "collectives/collective_log.h"

namespace eagercomm {
namespace log_subsys {
inline constexpr LogSubsys kSgd{4};  // eager SGD, the trainer, its models and data
}  // namespace log_subsys

inline constexpr LogSubsysName kSgdLogSubsystems[] = {{log_subsys::kSgd, "sgd"}};

}  // namespace eagercomm
