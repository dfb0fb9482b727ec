// The typed table of EAGERCOMM_* variables.
//
// Every knob of the runtime is one row of one table (name, type, default, unit, accepted
// values, doc), read once per process from the environment. A bad value is an error naming
// the variable and what it accepts; an unknown EAGERCOMM_* name is a warning (a typo must not
// silently fall back to a default). eagercomm-info prints every row with its value and where
// that value came from. Programs and tests may build a Config from any name -> value map.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace eagercomm {

enum class LogLevel : uint8_t { kError = 0, kWarn, kInfo, kDebug, kTrace };

// Where a variable's value in force came from.
enum class ConfigSource : uint8_t { kDefault, kEnvironment, kOverride };

enum class ProgressThreadMode : uint8_t { kAuto, kOn, kOff };
enum class AllreduceAlgo : uint8_t { kAuto, kRecursiveDoubling, kRing, kDirect };
enum class BroadcastAlgo : uint8_t { kAuto, kTree, kChain };
// How the verbs transport connects its queue pairs (transport/verbs/verbs_connect.h).
enum class IbConnectMode : uint8_t { kAuto, kCm, kStore };
// The largest path MTU of the verbs queue pairs: k256 + n is 256 << n bytes.
enum class IbMtu : uint8_t { kAuto, k256, k512, k1024, k2048, k4096 };

// The values in force. Field names mirror the variables (EAGERCOMM_SLOT_BYTES -> slot_bytes).
// Per-call timeout arguments (collectives/communicator.h, "Timeouts"; EC_TIMEOUT_DEFAULT and
// EC_WAIT_FOREVER in C, None and WAIT_FOREVER in Python): EAGERCOMM_TIMEOUT (Config::timeout),
// and no limit (the largest duration: deadlines saturate to "never").
inline constexpr std::chrono::nanoseconds kConfiguredTimeout{0};
inline constexpr std::chrono::nanoseconds kWaitForever = std::chrono::nanoseconds::max();

struct Config {
  std::string transport = "auto";        // auto|inproc|shm|ucx|verbs
  LogLevel log_level = LogLevel::kWarn;  // error|warn|info|debug|trace
  std::string log_subsys = "all";        // comma list, "all", or "^net,coll"
  std::string log_file;                  // empty: stderr; %h host, %p pid
  std::chrono::nanoseconds timeout = std::chrono::seconds(300);    // 0: wait forever
  std::chrono::nanoseconds spin = std::chrono::microseconds(100);  // idle poll before blocking
  std::chrono::nanoseconds heartbeat = std::chrono::seconds(1);    // 0: no heartbeats
  ProgressThreadMode progress_thread = ProgressThreadMode::kAuto;
  size_t slot_bytes = 256 * 1024;  // one mailbox slot, header included
  uint32_t slots = 8;              // mailbox slots per peer pair
  AllreduceAlgo allreduce_algo = AllreduceAlgo::kAuto;
  size_t rd_max_bytes = 16 * 1024;      // recursive doubling up to this size
  size_t direct_min_bytes = 16 * 1024;  // direct (load/store) allreduce from here
  size_t small_max_bytes = 8 * 1024;    // small-box allreduce up to this (0: off)
  BroadcastAlgo bcast_algo = BroadcastAlgo::kAuto;
  size_t chain_min_bytes = 256 * 1024;  // broadcast by chain from this size
  bool direct = true;                   // store into mapped peer memory if offered
  // The verbs transport's device: name ("" any), port (0 first active), GID index (kAutoIndex).
  static constexpr uint32_t kAutoIndex = UINT32_MAX;
  std::string ib_hca;
  uint32_t ib_port = 0;
  uint32_t ib_gid_index = kAutoIndex;
  IbConnectMode ib_connect = IbConnectMode::kAuto;  // rdma_cm, or QP numbers via the store
  // Queue-pair transport settings, on both connection paths (IB encodings; kAutoIndex: the
  // path's own SL / traffic class on the cm path, 0 on the store path).
  uint32_t ib_timeout = 18;
  uint32_t ib_retry_cnt = 7;
  uint32_t ib_sl = kAutoIndex;
  uint32_t ib_tc = kAutoIndex;
  IbMtu ib_mtu = IbMtu::kAuto;  // auto: the ports' (store path) or the path record's (cm)
  bool verbs_emulate = false;   // the verbs transport runs on the emulated device (tests)
  bool cuda = true;             // classify buffers through the CUDA driver
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

  // Parses `env` (only its EAGERCOMM_* entries matter). Errors name the variable, the bad
  // value and the accepted values; all bad variables are reported in one Status.
  static Result<Config> load(const std::map<std::string, std::string>& env);
  // Loads from this process's environment.
  static Result<Config> from_environ();
  // The process-wide configuration, read from the environment once, on first use. Returns the
  // same error every time when the environment is bad.
  static const Result<Config>& process();

  // Sets one variable by name as an override (source kOverride), with the same checks.
  Status set(std::string_view name, std::string_view value);

  // One row per variable, in table order, for eagercomm-info.
  struct Row {
    std::string name;      // "EAGERCOMM_SLOT_BYTES"
    std::string value;     // the value in force, formatted ("256KiB", "20us", "warn")
    std::string source;    // "default", "environment", "override"
    std::string accepted;  // "auto|inproc|shm|ucx|verbs", "size (4KiB..64MiB)", ...
    std::string doc;
    std::string default_value;  // the table's default text ("256KiB"); parses to Config{}'s value
  };
  std::vector<Row> describe() const;

  // EAGERCOMM_* names found in the environment given to load() that the table does not know.
  std::vector<std::string> unknown_names;

  ConfigSource source_of(std::string_view name) const;

  // The known variable nearest to `unknown_name` (optimal-string-alignment edit distance at
  // most 2, first in table order on ties), or "" when none is that close. Used for the
  // "did you mean EAGERCOMM_TIMEOUT?" hint on unknown names. Thread-safe (pure).
  static std::string suggest_name(std::string_view unknown_name);

 private:
  std::map<std::string, ConfigSource, std::less<>> sources_;
};

// Helpers shared with command-line parsing (bench flags use the same units as the table).
// "256k", "256KiB", "1M", "64MiB", "4096" -> bytes.
Result<size_t> parse_size(std::string_view text);
// "20us", "5ms", "30s", "2m", "0" -> duration (a bare number means seconds).
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);
// "1M" style for printing: exact binary units when exact ("256KiB"), bytes otherwise.
std::string format_size(size_t bytes);
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace eagercomm
