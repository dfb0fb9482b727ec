// The logger: levels, subsystems, one destination, lines that say who wrote them.
//
// EAGERCOMM_LOG_LEVEL picks the most verbose level printed, EAGERCOMM_LOG_SUBSYS the
// subsystems ("all", "net,coll", or "^net" for all but net), EAGERCOMM_LOG_FILE the
// destination (%h is replaced by the host name, %p by the pid; empty means stderr).
// Every line: "<host>:<pid>:<tid> [<rank>] <LEVEL> <subsys>: <message>". The rank is the
// calling thread's (set by the communicator that thread works for), "-" when unknown.
// Messages are lower-case and name the object they speak of (UCX's logging rules).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/config.h"

namespace eagercomm {

enum class LogSubsys : uint8_t { kInit, kNet, kColl, kPartial, kSgd, kMem, kEngine, kBoot, kBench };
inline constexpr int kLogSubsysCount = 9;
inline constexpr uint32_t kLogAllSubsys = (1u << kLogSubsysCount) - 1;
const char* log_subsys_name(LogSubsys s);  // "init", "net", ...
const char* log_level_name(LogLevel l);    // "ERROR", "WARN", ...

namespace log_detail {
// Bit i set: subsystem i enabled. Level and mask are read on every EC_LOG without a lock.
extern std::atomic<int> g_level;
extern std::atomic<uint32_t> g_subsys_mask;
void write(LogLevel level, LogSubsys subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
}  // namespace log_detail

inline bool log_enabled(LogLevel level, LogSubsys subsys) {
  return static_cast<int>(level) <= log_detail::g_level.load(std::memory_order_relaxed) &&
         (log_detail::g_subsys_mask.load(std::memory_order_relaxed) >>
          static_cast<unsigned>(subsys)) &
             1u;
}

// Applies EAGERCOMM_LOG_LEVEL / _SUBSYS / _FILE from `config`. Called by every communicator
// creation with the process config; safe to call again (later calls win) and from any thread.
// Returns an error when the subsystem list names an unknown subsystem or the file can't open.
Status log_configure(const Config& config);

// The rank printed in this thread's lines (-1: unknown).
void log_set_thread_rank(int rank);
int log_thread_rank();

// Expands %h and %p in a log file pattern.
std::string log_expand_path(const std::string& pattern);

// Parses an EAGERCOMM_LOG_SUBSYS value into a subsystem mask (bit i: LogSubsys i): "all", a
// comma list of names ("net,coll", case-insensitive, blanks around names ignored), or either
// after a leading "^" meaning all but those. An empty list or an unknown name is a
// kInvalidArgument Status naming every unknown name and the accepted ones. Thread-safe (pure).
Result<uint32_t> log_parse_subsys(std::string_view list);

}  // namespace eagercomm

#define EC_LOG(level, subsys, ...)                                                    \
  do {                                                                                \
    if (::eagercomm::log_enabled(level, subsys))                                      \
      ::eagercomm::log_detail::write(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define EC_ERROR(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kError, ::eagercomm::LogSubsys::subsys, __VA_ARGS__)
#define EC_WARN(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kWarn, ::eagercomm::LogSubsys::subsys, __VA_ARGS__)
#define EC_INFO(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kInfo, ::eagercomm::LogSubsys::subsys, __VA_ARGS__)
#define EC_DEBUG(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kDebug, ::eagercomm::LogSubsys::subsys, __VA_ARGS__)
#define EC_TRACE(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kTrace, ::eagercomm::LogSubsys::subsys, __VA_ARGS__)
