// The runtime's part of the EAGERCOMM_* table.
//
// Every knob is one row of one table (name, type, default, unit, accepted values, doc), read
// once per process from the environment. A bad value is an error naming the variable and what
// it accepts; an unknown EAGERCOMM_* name is a warning (a typo must not silently fall back to a
// default). eagercomm-info prints every row with its value and where that value came from.
//
// Each layer owns its rows and the struct they fill: RuntimeConfig here (logging, timing, the
// CUDA driver, where a process stands in its job), TransportConfig (transport/
// transport_config.h), VerbsConfig (transport/verbs/verbs_config.h), CollectiveConfig
// (collectives/collective_config.h). The library composes them into the one Config
// (collectives/config.h) that programs load and pass down; a layer's functions take its own
// struct, which every Config is. The table's machinery is runtime/config_table.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/config_table.h"
#include "runtime/status.h"

namespace eagercomm {

enum class LogLevel : uint8_t { kError = 0, kWarn, kInfo, kDebug, kTrace };
enum class ProgressThreadMode : uint8_t { kAuto, kOn, kOff };

// The values in force. Field names mirror the variables (EAGERCOMM_SLOT_BYTES -> slot_bytes).
// Per-call timeout arguments (collectives/communicator.h, "Timeouts"; EC_TIMEOUT_DEFAULT and
// EC_WAIT_FOREVER in C, None and WAIT_FOREVER in Python): EAGERCOMM_TIMEOUT (Config::timeout),
// and no limit (the largest duration: deadlines saturate to "never").
inline constexpr std::chrono::nanoseconds kConfiguredTimeout{0};
inline constexpr std::chrono::nanoseconds kWaitForever = std::chrono::nanoseconds::max();

// The runtime's values in force. Field names mirror the variables (EAGERCOMM_SPIN -> spin).
// It carries the table's bookkeeping (sources, unknown names): the launch environment asks
// whether a variable was set.
struct RuntimeConfig : ConfigRecord {
  LogLevel log_level = LogLevel::kWarn;  // error|warn|info|debug|trace
  std::string log_subsys = "all";        // comma list, "all", or "^net,coll"
  std::string log_file;                  // empty: stderr; %h host, %p pid
  std::chrono::nanoseconds timeout = std::chrono::seconds(300);    // 0: wait forever
  std::chrono::nanoseconds spin = std::chrono::microseconds(100);  // idle poll before blocking
  std::chrono::nanoseconds heartbeat = std::chrono::seconds(1);    // 0: no heartbeats
  ProgressThreadMode progress_thread = ProgressThreadMode::kAuto;
  bool cuda = true;                          // classify buffers through the CUDA driver
  std::string cuda_driver = "libcuda.so.1";  // the driver library dlopen()ed for that
  // Where this process stands in its job (launcher variables; see launch_env.h).
  uint32_t rank = 0;
  uint32_t size = 1;
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  std::string master_addr;
  uint32_t master_port = 0;
  std::string job_id;
  std::string job_token;
};

// The runtime's rows, in two groups that the table lists apart: logging and timing (after
// EAGERCOMM_TRANSPORT), the CUDA driver and the job (last).
std::span<const ConfigRow> runtime_logging_and_timing_rows();
std::span<const ConfigRow> runtime_device_and_job_rows();

// The process-wide configuration (Config::process(): the whole table, read from the
// environment once) as the runtime sees it, or the same error every time when the environment
// is bad. Defined with the composed table (collectives/config.cc).
const Result<const RuntimeConfig*>& process_runtime_config();

}  // namespace eagercomm
