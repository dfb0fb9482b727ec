// The logger: levels, subsystems, one destination, lines that say who wrote them.
//
// EAGERCOMM_LOG_LEVEL picks the most verbose level printed, EAGERCOMM_LOG_SUBSYS the
// subsystems ("all", "net,coll", or "^net" for all but net), EAGERCOMM_LOG_FILE the
// destination (%h is replaced by the host name, %p by the pid; empty means stderr).
// Every line: "<host>:<pid>:<tid> [<rank>] <LEVEL> <subsys>: <message>". The rank is the
// calling thread's (set by the communicator that thread works for), "-" when unknown.
// Messages are lower-case and name the object they speak of (UCX's logging rules).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/config.h"

namespace eagercomm {

// A subsystem is a bit of the EAGERCOMM_LOG_SUBSYS mask. Each layer names its own as constants
// in eagercomm::log_subsys (the runtime's below; transport/transport_log.h,
// collectives/collective_log.h, sgd/sgd_log.h, bench/bench_log.h), so that EC_WARN(kNet, ...)
// reads the same everywhere; the library's catalogue (collectives/log_subsystems.cc) lists
// them all with their names, checking at compile time that no two share an id.
enum class LogSubsys : uint8_t {};
inline constexpr int kLogSubsysCapacity = 32;  // bits of the mask

namespace log_subsys {
inline constexpr LogSubsys kInit{0};    // configuration, library start-up
inline constexpr LogSubsys kEngine{6};  // the progress engine
inline constexpr LogSubsys kBoot{7};    // launchers, the bootstrap store, joining a job
}  // namespace log_subsys

// One line of the catalogue.
struct LogSubsysName {
  LogSubsys id;
  const char* name;  // lower case: "net"
};
inline constexpr LogSubsysName kRuntimeLogSubsystems[] = {
    {log_subsys::kInit, "init"}, {log_subsys::kEngine, "engine"}, {log_subsys::kBoot, "boot"}};

// The catalogue: subsystems 0 .. kLogSubsysCount - 1 and their names. Defined where every
// layer's subsystems are known (collectives/log_subsystems.cc), constant-initialized, so it is
// complete before any code runs.
extern const int kLogSubsysCount;
extern const uint32_t kLogAllSubsys;       // every subsystem's bit
const char* log_subsys_name(LogSubsys s);  // "init", "net", ...; "unknown" past the catalogue
const char* log_level_name(LogLevel l);    // "ERROR", "WARN", ...

namespace log_detail {
// The catalogue's names, index = subsystem id (see kLogSubsysCount).
extern const std::array<const char*, kLogSubsysCapacity> kSubsysNames;
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
Status log_configure(const RuntimeConfig& config);

// The rank printed in this thread's lines (-1: unknown). Messages do not repeat it: a thread
// that works for a rank sets it where it starts (or enters the library), and lines name only
// the peers they speak of.
void log_set_thread_rank(int rank);
int log_thread_rank();

// Sets this thread's rank for a scope, then restores the one it had: for work done for one
// rank on a thread that may serve others or none (a communicator destroyed by the thread that
// created a whole world, a transport created for each rank in turn).
class ScopedLogRank {
 public:
  explicit ScopedLogRank(int rank) : previous_(log_thread_rank()) { log_set_thread_rank(rank); }
  ~ScopedLogRank() { log_set_thread_rank(previous_); }
  ScopedLogRank(const ScopedLogRank&) = delete;
  ScopedLogRank& operator=(const ScopedLogRank&) = delete;

 private:
  int previous_;
};

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
// `subsys` is the bare name of a constant in eagercomm::log_subsys: EC_WARN(kNet, ...).
#define EC_ERROR(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kError, ::eagercomm::log_subsys::subsys, __VA_ARGS__)
#define EC_WARN(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kWarn, ::eagercomm::log_subsys::subsys, __VA_ARGS__)
#define EC_INFO(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kInfo, ::eagercomm::log_subsys::subsys, __VA_ARGS__)
#define EC_DEBUG(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kDebug, ::eagercomm::log_subsys::subsys, __VA_ARGS__)
#define EC_TRACE(subsys, ...) \
  EC_LOG(::eagercomm::LogLevel::kTrace, ::eagercomm::log_subsys::subsys, __VA_ARGS__)
