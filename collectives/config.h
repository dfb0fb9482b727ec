// The library's configuration: every layer's part of the EAGERCOMM_* table in one struct.
//
// Config derives from each layer's struct (RuntimeConfig, TransportConfig with VerbsConfig,
// CollectiveConfig), so fields keep the variables' names (EAGERCOMM_SLOT_BYTES ->
// config.slot_bytes) and a Config is passed wherever a layer wants its own struct. The rows
// are listed in one place (config.cc), in the order eagercomm-info prints them.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/collective_config.h"
#include "runtime/config.h"
#include "runtime/config_table.h"
#include "runtime/status.h"
#include "transport/transport_config.h"
#include "transport/verbs/verbs_config.h"

namespace eagercomm {

struct Config : TransportConfig, CollectiveConfig {
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
  std::vector<Row> describe() const;

  // The known variable nearest to `unknown_name` (optimal-string-alignment edit distance at
  // most 2, first in table order on ties), or "" when none is that close. Used for the
  // "did you mean EAGERCOMM_TIMEOUT?" hint on unknown names. Thread-safe (pure).
  static std::string suggest_name(std::string_view unknown_name);
};

}  // namespace eagercomm
