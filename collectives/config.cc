// The one place that lists every layer's rows: the table's order is the order eagercomm-info
// prints and errors are reported in, with related knobs side by side across layers.
#include "collectives/config.h"

#include <span>

#include "collectives/collective_log.h"

namespace eagercomm {
namespace {

std::span<const ConfigGroup> config_groups() {
  static const ConfigGroup kGroups[] = {
      config_group<Config, TransportConfig>(transport_selection_rows()),
      config_group<Config, RuntimeConfig>(runtime_logging_and_timing_rows()),
      config_group<Config, TransportConfig>(transport_mailbox_rows()),
      config_group<Config, CollectiveConfig>(collective_config_rows()),
      config_group<Config, VerbsConfig>(verbs_config_rows()),
      config_group<Config, RuntimeConfig>(runtime_device_and_job_rows()),
  };
  return kGroups;
}

}  // namespace

Result<Config> Config::load(const std::map<std::string, std::string>& env) {
  Config config;
  EC_RETURN_IF_ERROR(config_load(config_groups(), env, &config, &config));
  return config;
}

Result<Config> Config::from_environ() { return load(config_environ()); }

const Result<Config>& Config::process() {
  static const Result<Config> result = []() -> Result<Config> {
    Result<Config> config = from_environ();
    if (!config.ok()) return config;
    // The log file is part of the configuration: failing to open it is a configuration error,
    // not something to hide by logging to stderr instead.
    EC_RETURN_IF_ERROR(log_configure(*config));
    for (const std::string& name : config->unknown_names) {
      const std::string hint = suggest_name(name);
      if (hint.empty()) {
        EC_WARN(kInit, "ignoring unknown variable %s", name.c_str());
      } else {
        EC_WARN(kInit, "ignoring unknown variable %s (did you mean %s?)", name.c_str(),
                hint.c_str());
      }
    }
    return config;
  }();
  return result;
}

Status Config::set(std::string_view name, std::string_view value) {
  return config_set(config_groups(), name, value, this, *this);
}

std::vector<Config::Row> Config::describe() const {
  return config_describe(config_groups(), this, *this);
}

std::string Config::suggest_name(std::string_view unknown_name) {
  return config_suggest_name(config_groups(), unknown_name);
}

const Result<const RuntimeConfig*>& process_runtime_config() {
  static const Result<const RuntimeConfig*> result = []() -> Result<const RuntimeConfig*> {
    const Result<Config>& config = Config::process();
    if (!config.ok()) return config.status();
    return static_cast<const RuntimeConfig*>(&*config);
  }();
  return result;
}

}  // namespace eagercomm
