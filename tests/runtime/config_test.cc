#include "collectives/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "runtime/log.h"
#include "transport/transport_log.h"

namespace eagercomm {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using Env = std::map<std::string, std::string>;

// The value of one variable as describe() prints it.
std::string value_of(const Config& config, const std::string& name) {
  for (const Config::Row& row : config.describe()) {
    if (row.name == name) return row.value;
  }
  ADD_FAILURE() << "no row " << name;
  return {};
}

// The error message load() gives for a one-variable environment.
std::string load_error(const std::string& name, const std::string& value) {
  Result<Config> config = Config::load({{name, value}});
  EXPECT_FALSE(config.ok()) << name << "=" << value << " was accepted";
  if (config.ok()) return {};
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  return config.status().message();
}

Config load_ok(const Env& env) {
  Result<Config> config = Config::load(env);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  return config.ok() ? *config : Config{};
}

// ---- the table ----

TEST(ConfigTable, RowsInOrderWithDefaults) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"EAGERCOMM_TRANSPORT", "auto"},
      {"EAGERCOMM_LOG_LEVEL", "warn"},
      {"EAGERCOMM_LOG_SUBSYS", "all"},
      {"EAGERCOMM_LOG_FILE", ""},
      {"EAGERCOMM_TIMEOUT", "300s"},
      {"EAGERCOMM_HEARTBEAT", "1s"},
      {"EAGERCOMM_SPIN", "100us"},
      {"EAGERCOMM_PROGRESS_THREAD", "auto"},
      {"EAGERCOMM_SLOT_BYTES", "256KiB"},
      {"EAGERCOMM_SLOTS", "8"},
      {"EAGERCOMM_ALLREDUCE_ALGO", "auto"},
      {"EAGERCOMM_RD_MAX_BYTES", "16KiB"},
      {"EAGERCOMM_DIRECT_MIN_BYTES", "16KiB"},
      {"EAGERCOMM_SMALL_MAX_BYTES", "8KiB"},
      {"EAGERCOMM_BCAST_ALGO", "auto"},
      {"EAGERCOMM_CHAIN_MIN_BYTES", "256KiB"},
      {"EAGERCOMM_DIRECT", "1"},
      {"EAGERCOMM_PROBE_AFTER", "50ms"},
      {"EAGERCOMM_STRAGGLER_REPORT", "0"},
      {"EAGERCOMM_IB_HCA", ""},
      {"EAGERCOMM_IB_PORT", "0"},
      {"EAGERCOMM_IB_GID_INDEX", "auto"},
      {"EAGERCOMM_IB_CONNECT", "auto"},
      {"EAGERCOMM_IB_TIMEOUT", "18"},
      {"EAGERCOMM_IB_RETRY_CNT", "7"},
      {"EAGERCOMM_IB_SL", "auto"},
      {"EAGERCOMM_IB_TC", "auto"},
      {"EAGERCOMM_IB_MTU", "auto"},
      {"EAGERCOMM_VERBS_EMULATE", "0"},
      {"EAGERCOMM_CUDA", "1"},
      {"EAGERCOMM_CUDA_DRIVER", "libcuda.so.1"},
      {"EAGERCOMM_RANK", "0"},
      {"EAGERCOMM_SIZE", "1"},
      {"EAGERCOMM_LOCAL_RANK", "0"},
      {"EAGERCOMM_LOCAL_SIZE", "1"},
      {"EAGERCOMM_MASTER_ADDR", ""},
      {"EAGERCOMM_MASTER_PORT", "0"},
      {"EAGERCOMM_JOB_ID", ""},
      {"EAGERCOMM_JOB_TOKEN", ""},
  };
  const std::vector<Config::Row> rows = Config{}.describe();
  ASSERT_EQ(rows.size(), expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].name, expected[i].first);
    EXPECT_EQ(rows[i].value, expected[i].second) << rows[i].name;
    EXPECT_EQ(rows[i].source, "default") << rows[i].name;
    EXPECT_FALSE(rows[i].doc.empty()) << rows[i].name;
    EXPECT_FALSE(rows[i].accepted.empty()) << rows[i].name;
  }
}

// The table's default text and the Config member initializers are two spellings of one
// default: they must agree for every row.
TEST(ConfigTable, DefaultTextParsesToTheMemberInitializer) {
  const std::vector<Config::Row> defaults = Config{}.describe();
  for (size_t i = 0; i < defaults.size(); ++i) {
    Config config;
    ASSERT_TRUE(config.set(defaults[i].name, defaults[i].default_value).ok()) << defaults[i].name;
    EXPECT_EQ(config.describe()[i].value, defaults[i].value) << defaults[i].name;
  }
}

TEST(ConfigTable, AcceptedTexts) {
  std::map<std::string, std::string> accepted;
  for (const Config::Row& row : Config{}.describe()) accepted[row.name] = row.accepted;
  EXPECT_EQ(accepted["EAGERCOMM_TRANSPORT"], "auto|inproc|shm|ucx|verbs|sim");
  EXPECT_EQ(accepted["EAGERCOMM_LOG_LEVEL"], "error|warn|info|debug|trace");
  EXPECT_EQ(accepted["EAGERCOMM_PROGRESS_THREAD"], "auto|on|off");
  EXPECT_EQ(accepted["EAGERCOMM_ALLREDUCE_ALGO"], "auto|rd|ring|direct");
  EXPECT_EQ(accepted["EAGERCOMM_BCAST_ALGO"], "auto|tree|chain");
  EXPECT_EQ(accepted["EAGERCOMM_DIRECT"], "1|0|true|false|yes|no|on|off");
  EXPECT_EQ(accepted["EAGERCOMM_SLOT_BYTES"], "size (4KiB..64MiB)");
  EXPECT_EQ(accepted["EAGERCOMM_SMALL_MAX_BYTES"], "size (0..64KiB)");
  EXPECT_EQ(accepted["EAGERCOMM_RD_MAX_BYTES"], "size (0..64MiB)");
  EXPECT_EQ(accepted["EAGERCOMM_CHAIN_MIN_BYTES"], "size");
  EXPECT_EQ(accepted["EAGERCOMM_SPIN"], "duration (0..1s)");
  EXPECT_EQ(accepted["EAGERCOMM_TIMEOUT"], "duration");
  EXPECT_EQ(accepted["EAGERCOMM_HEARTBEAT"], "duration (0..60s)");
  EXPECT_EQ(accepted["EAGERCOMM_PROBE_AFTER"], "duration (0..3600s)");
  EXPECT_EQ(accepted["EAGERCOMM_SLOTS"], "integer (2..64)");
  EXPECT_EQ(accepted["EAGERCOMM_STRAGGLER_REPORT"], "integer (0..1073741824)");
  EXPECT_NE(
      accepted["EAGERCOMM_LOG_SUBSYS"].find("init,net,coll,partial,sgd,mem,engine,boot,bench"),
      std::string::npos);
  EXPECT_NE(accepted["EAGERCOMM_LOG_FILE"].find("%p"), std::string::npos);
}

// ---- load(): each kind ----

TEST(ConfigTable, TheJobTokenIsNeverShown) {
  const Config c = load_ok({{"EAGERCOMM_JOB_TOKEN", "s3cret"}});
  EXPECT_EQ(c.job_token, "s3cret");
  for (const auto& row : c.describe()) {
    EXPECT_EQ(row.value.find("s3cret"), std::string::npos) << row.name;
    if (row.name == "EAGERCOMM_JOB_TOKEN") {
      EXPECT_EQ(row.value, "(set, not shown)");
    }
  }
}

TEST(ConfigLoad, EmptyEnvironmentGivesDefaults) {
  const Config config = load_ok({});
  EXPECT_EQ(config.transport, "auto");
  EXPECT_EQ(config.log_level, LogLevel::kWarn);
  EXPECT_EQ(config.timeout, seconds(300));
  EXPECT_EQ(config.spin, microseconds(100));
  EXPECT_EQ(config.slot_bytes, 256u * 1024);
  EXPECT_EQ(config.slots, 8u);
  EXPECT_TRUE(config.direct);
  EXPECT_TRUE(config.unknown_names.empty());
}

TEST(ConfigLoad, EnumsAreCaseInsensitiveAndCanonical) {
  const Config config = load_ok({{"EAGERCOMM_TRANSPORT", "SHM"},
                                 {"EAGERCOMM_LOG_LEVEL", "Debug"},
                                 {"EAGERCOMM_PROGRESS_THREAD", "off"},
                                 {"EAGERCOMM_ALLREDUCE_ALGO", "RD"},
                                 {"EAGERCOMM_BCAST_ALGO", "Chain"}});
  EXPECT_EQ(config.transport, "shm");  // stored canonical, not as typed
  EXPECT_EQ(config.log_level, LogLevel::kDebug);
  EXPECT_EQ(config.progress_thread, ProgressThreadMode::kOff);
  EXPECT_EQ(config.allreduce_algo, AllreduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(config.bcast_algo, BroadcastAlgo::kChain);
  EXPECT_EQ(value_of(config, "EAGERCOMM_LOG_LEVEL"), "debug");

  EXPECT_EQ(load_ok({{"EAGERCOMM_LOG_LEVEL", "trace"}}).log_level, LogLevel::kTrace);
  EXPECT_EQ(load_ok({{"EAGERCOMM_ALLREDUCE_ALGO", "ring"}}).allreduce_algo, AllreduceAlgo::kRing);
  EXPECT_EQ(load_ok({{"EAGERCOMM_BCAST_ALGO", "tree"}}).bcast_algo, BroadcastAlgo::kTree);
  EXPECT_EQ(load_ok({{"EAGERCOMM_PROGRESS_THREAD", "ON"}}).progress_thread,
            ProgressThreadMode::kOn);
  EXPECT_EQ(load_ok({{"EAGERCOMM_TRANSPORT", "verbs"}}).transport, "verbs");
}

TEST(ConfigLoad, BadEnumNamesVariableValueAndChoices) {
  EXPECT_EQ(load_error("EAGERCOMM_TRANSPORT", "tcp"),
            "EAGERCOMM_TRANSPORT='tcp' is not one of auto|inproc|shm|ucx|verbs|sim");
  EXPECT_EQ(load_error("EAGERCOMM_LOG_LEVEL", "verbose"),
            "EAGERCOMM_LOG_LEVEL='verbose' is not one of error|warn|info|debug|trace");
  EXPECT_EQ(load_error("EAGERCOMM_ALLREDUCE_ALGO", ""),
            "EAGERCOMM_ALLREDUCE_ALGO='' is not one of auto|rd|ring|direct");
  // No prefix matching and no blanks: "ring " is a typo, not ring.
  EXPECT_FALSE(Config::load({{"EAGERCOMM_ALLREDUCE_ALGO", "ring "}}).ok());
  EXPECT_FALSE(Config::load({{"EAGERCOMM_BCAST_ALGO", "tre"}}).ok());
}

TEST(ConfigLoad, Bools) {
  for (const char* yes : {"1", "true", "TRUE", "yes", "Yes", "on", "ON"}) {
    Config config;
    config.direct = false;
    ASSERT_TRUE(config.set("EAGERCOMM_DIRECT", yes).ok()) << yes;
    EXPECT_TRUE(config.direct) << yes;
  }
  for (const char* no : {"0", "false", "False", "no", "NO", "off", "Off"}) {
    Config config;
    ASSERT_TRUE(config.set("EAGERCOMM_DIRECT", no).ok()) << no;
    EXPECT_FALSE(config.direct) << no;
    EXPECT_EQ(value_of(config, "EAGERCOMM_DIRECT"), "0");
  }
  EXPECT_EQ(load_error("EAGERCOMM_DIRECT", "maybe"),
            "EAGERCOMM_DIRECT='maybe' is not one of 1|0|true|false|yes|no|on|off");
  for (const char* bad : {"", "2", "y", "enable", " 1"}) load_error("EAGERCOMM_DIRECT", bad);
}

TEST(ConfigLoad, SizesWithRange) {
  EXPECT_EQ(load_ok({{"EAGERCOMM_SLOT_BYTES", "4k"}}).slot_bytes, 4096u);
  EXPECT_EQ(load_ok({{"EAGERCOMM_SLOT_BYTES", "64MiB"}}).slot_bytes, 64u << 20);
  EXPECT_EQ(load_ok({{"EAGERCOMM_SLOT_BYTES", "5000"}}).slot_bytes, 5000u);
  EXPECT_EQ(load_ok({{"EAGERCOMM_RD_MAX_BYTES", "0"}}).rd_max_bytes, 0u);
  EXPECT_EQ(load_ok({{"EAGERCOMM_SMALL_MAX_BYTES", "0"}}).small_max_bytes, 0u);
  EXPECT_FALSE(Config::load({{"EAGERCOMM_SMALL_MAX_BYTES", "65KiB"}}).ok());
  EXPECT_EQ(load_ok({{"EAGERCOMM_CHAIN_MIN_BYTES", "1g"}}).chain_min_bytes, size_t{1} << 30);

  EXPECT_EQ(load_error("EAGERCOMM_SLOT_BYTES", "4095"),
            "EAGERCOMM_SLOT_BYTES='4095' is not a size (4KiB..64MiB): out of range");
  EXPECT_EQ(load_error("EAGERCOMM_SLOT_BYTES", "65M"),
            "EAGERCOMM_SLOT_BYTES='65M' is not a size (4KiB..64MiB): out of range");
  EXPECT_EQ(load_error("EAGERCOMM_RD_MAX_BYTES", "64MiB1"),
            "EAGERCOMM_RD_MAX_BYTES='64MiB1' is not a size (0..64MiB): expected a whole number "
            "of bytes with an optional binary unit (4096, 256k, 256KiB, 1M, 1g)");
  const std::string fraction = load_error("EAGERCOMM_SLOT_BYTES", "1.5M");
  EXPECT_NE(fraction.find("EAGERCOMM_SLOT_BYTES='1.5M' is not a size (4KiB..64MiB): fractions"),
            std::string::npos)
      << fraction;
  const std::string huge = load_error("EAGERCOMM_CHAIN_MIN_BYTES", "20EiB");
  EXPECT_EQ(huge, "EAGERCOMM_CHAIN_MIN_BYTES='20EiB' is not a size: too large");
}

TEST(ConfigLoad, DurationsWithRange) {
  EXPECT_EQ(load_ok({{"EAGERCOMM_TIMEOUT", "0"}}).timeout, nanoseconds(0));
  EXPECT_EQ(load_ok({{"EAGERCOMM_TIMEOUT", "2m"}}).timeout, minutes(2));
  EXPECT_EQ(load_ok({{"EAGERCOMM_TIMEOUT", "1h"}}).timeout, hours(1));
  EXPECT_EQ(load_ok({{"EAGERCOMM_TIMEOUT", "45"}}).timeout, seconds(45));  // bare: seconds
  EXPECT_EQ(load_ok({{"EAGERCOMM_SPIN", "0"}}).spin, nanoseconds(0));
  EXPECT_EQ(load_ok({{"EAGERCOMM_SPIN", "1s"}}).spin, seconds(1));
  EXPECT_EQ(load_ok({{"EAGERCOMM_SPIN", "500ns"}}).spin, nanoseconds(500));
  EXPECT_EQ(load_ok({{"EAGERCOMM_HEARTBEAT", "0"}}).heartbeat, nanoseconds(0));
  EXPECT_EQ(load_ok({{"EAGERCOMM_HEARTBEAT", "250ms"}}).heartbeat, milliseconds(250));
  EXPECT_EQ(load_ok({{"EAGERCOMM_PROBE_AFTER", "0"}}).probe_after, nanoseconds(0));
  EXPECT_EQ(load_ok({{"EAGERCOMM_PROBE_AFTER", "2s"}}).probe_after, seconds(2));
  EXPECT_NE(load_error("EAGERCOMM_HEARTBEAT", "2m").find("EAGERCOMM_HEARTBEAT='2m'"),
            std::string::npos);

  EXPECT_EQ(load_error("EAGERCOMM_SPIN", "1001ms"),
            "EAGERCOMM_SPIN='1001ms' is not a duration (0..1s): out of range");
  const std::string junk = load_error("EAGERCOMM_TIMEOUT", "5 min");
  EXPECT_EQ(junk.rfind("EAGERCOMM_TIMEOUT='5 min' is not a duration: expected", 0), 0u) << junk;
  load_error("EAGERCOMM_TIMEOUT", "-1");
  load_error("EAGERCOMM_TIMEOUT", "");
}

TEST(ConfigLoad, IntegersDecimalOnlyAndRangeChecked) {
  EXPECT_EQ(load_ok({{"EAGERCOMM_SLOTS", "2"}}).slots, 2u);
  EXPECT_EQ(load_ok({{"EAGERCOMM_SLOTS", "64"}}).slots, 64u);
  EXPECT_EQ(load_ok({{"EAGERCOMM_SLOTS", "016"}}).slots, 16u);  // decimal, not octal
  EXPECT_EQ(load_error("EAGERCOMM_SLOTS", "65"),
            "EAGERCOMM_SLOTS='65' is not an integer (2..64): out of range");
  EXPECT_EQ(load_error("EAGERCOMM_SLOTS", "1"),
            "EAGERCOMM_SLOTS='1' is not an integer (2..64): out of range");
  EXPECT_EQ(load_error("EAGERCOMM_STRAGGLER_REPORT", "-1"),
            "EAGERCOMM_STRAGGLER_REPORT='-1' is not an integer (0..1073741824): expected decimal "
            "digits");
  EXPECT_EQ(load_ok({{"EAGERCOMM_STRAGGLER_REPORT", "100"}}).straggler_report, 100u);
  EXPECT_EQ(load_error("EAGERCOMM_SLOTS", "0x10"),
            "EAGERCOMM_SLOTS='0x10' is not an integer (2..64): expected decimal digits");
  for (const char* bad : {"", " ", "+5", "-3", "4.0", "8k", "99999999999999999999999"}) {
    load_error("EAGERCOMM_SLOTS", bad);
  }
  // 2^32 + 8 must not wrap into the uint32_t field as 8.
  load_error("EAGERCOMM_SLOTS", "4294967304");
}

TEST(ConfigLoad, SubsystemListIsValidated) {
  EXPECT_EQ(load_ok({{"EAGERCOMM_LOG_SUBSYS", "^net,coll"}}).log_subsys, "^net,coll");
  EXPECT_EQ(load_ok({{"EAGERCOMM_LOG_SUBSYS", "net"}}).log_subsys, "net");
  const std::string bad = load_error("EAGERCOMM_LOG_SUBSYS", "net,colls");
  EXPECT_EQ(bad.rfind("EAGERCOMM_LOG_SUBSYS='net,colls' is not a subsystem list: unknown "
                      "subsystem 'colls'",
                      0),
            0u)
      << bad;
  EXPECT_NE(bad.find("init, net, coll, partial, sgd, mem, engine, boot, bench"), std::string::npos)
      << bad;
  load_error("EAGERCOMM_LOG_SUBSYS", "");
}

TEST(ConfigLoad, StringsAreKeptAsWritten) {
  EXPECT_EQ(load_ok({{"EAGERCOMM_LOG_FILE", "/tmp/ec.%h.%p.log"}}).log_file, "/tmp/ec.%h.%p.log");
  EXPECT_EQ(load_ok({{"EAGERCOMM_LOG_FILE", ""}}).log_file, "");
}

TEST(ConfigLoad, AllBadVariablesReportedTogetherInTableOrder) {
  Result<Config> config = Config::load({{"EAGERCOMM_DIRECT", "maybe"},
                                        {"EAGERCOMM_SLOTS", "1000"},
                                        {"EAGERCOMM_TIMEOUT", "5"},  // good: not reported
                                        {"EAGERCOMM_TRANSPORT", "tcp"}});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(),
            "EAGERCOMM_TRANSPORT='tcp' is not one of auto|inproc|shm|ucx|verbs|sim; "
            "EAGERCOMM_SLOTS='1000' is not an integer (2..64): out of range; "
            "EAGERCOMM_DIRECT='maybe' is not one of 1|0|true|false|yes|no|on|off");
}

// ---- unknown names ----

TEST(ConfigUnknown, UnknownNamesAreCollectedNotErrors) {
  const Config config = load_ok({{"EAGERCOMM_TIMOUT", "5s"},
                                 {"EAGERCOMM_FOO_BAR", "1"},
                                 {"OTHER_VARIABLE", "x"},
                                 {"EAGERCOMMX", "x"},
                                 {"EAGERCOMM_SLOTS", "4"}});
  EXPECT_EQ(config.unknown_names,
            (std::vector<std::string>{"EAGERCOMM_FOO_BAR", "EAGERCOMM_TIMOUT"}));
  EXPECT_EQ(config.timeout, seconds(300));  // the typo did not set the timeout
  EXPECT_EQ(config.slots, 4u);
}

TEST(ConfigUnknown, UnknownNameAloneNeverFails) {
  // An unknown name is a warning, never an error; a bad known one still fails next to it.
  EXPECT_TRUE(Config::load({{"EAGERCOMM_NOPE", "garbage"}}).ok());
  EXPECT_FALSE(Config::load({{"EAGERCOMM_NOPE", "x"}, {"EAGERCOMM_SLOTS", "x"}}).ok());
}

TEST(ConfigUnknown, DidYouMean) {
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_TIMOUT"), "EAGERCOMM_TIMEOUT");    // deletion
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_TIMEOUTT"), "EAGERCOMM_TIMEOUT");  // insertion
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_SOLTS"), "EAGERCOMM_SLOTS");       // transposition
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_SLOT"), "EAGERCOMM_SLOTS");
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_LOG_LVL"), "EAGERCOMM_LOG_LEVEL");  // distance 2
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_LOG_LV"), "");                      // distance 3
  EXPECT_EQ(Config::suggest_name("EAGERCOMM_FOO_BAR"), "");
  EXPECT_EQ(Config::suggest_name(""), "");
}

// ---- sources, set(), describe() ----

TEST(ConfigSources, DefaultEnvironmentOverride) {
  Config config = load_ok({{"EAGERCOMM_TIMEOUT", "10s"}});
  EXPECT_EQ(config.source_of("EAGERCOMM_TIMEOUT"), ConfigSource::kEnvironment);
  EXPECT_EQ(config.source_of("EAGERCOMM_SLOTS"), ConfigSource::kDefault);
  EXPECT_EQ(config.source_of("EAGERCOMM_NOT_A_VARIABLE"), ConfigSource::kDefault);

  ASSERT_TRUE(config.set("EAGERCOMM_SLOTS", "16").ok());
  EXPECT_EQ(config.slots, 16u);
  EXPECT_EQ(config.source_of("EAGERCOMM_SLOTS"), ConfigSource::kOverride);
  ASSERT_TRUE(config.set("EAGERCOMM_TIMEOUT", "20s").ok());
  EXPECT_EQ(config.source_of("EAGERCOMM_TIMEOUT"), ConfigSource::kOverride);

  std::map<std::string, std::string> sources;
  for (const Config::Row& row : config.describe()) sources[row.name] = row.source;
  EXPECT_EQ(sources["EAGERCOMM_TIMEOUT"], "override");
  EXPECT_EQ(sources["EAGERCOMM_SLOTS"], "override");
  EXPECT_EQ(sources["EAGERCOMM_SPIN"], "default");
  EXPECT_EQ(load_ok({{"EAGERCOMM_SPIN", "1ms"}}).describe()[6].source, "environment");
}

TEST(ConfigSet, BadValueLeavesValueAndSourceAlone) {
  Config config;
  const Status status = config.set("EAGERCOMM_SLOTS", "100");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "EAGERCOMM_SLOTS='100' is not an integer (2..64): out of range");
  EXPECT_EQ(config.slots, 8u);
  EXPECT_EQ(config.source_of("EAGERCOMM_SLOTS"), ConfigSource::kDefault);
}

TEST(ConfigSet, UnknownNameIsAnErrorWithHint) {
  Config config;
  const Status status = config.set("EAGERCOMM_SPINN", "1us");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "unknown variable EAGERCOMM_SPINN (did you mean EAGERCOMM_SPIN?)");
  EXPECT_EQ(config.set("NOPE", "1").message(), "unknown variable NOPE");
}

TEST(ConfigDescribe, ValuesAreFormatted) {
  const Config config = load_ok({{"EAGERCOMM_SLOT_BYTES", "1M"},
                                 {"EAGERCOMM_CHAIN_MIN_BYTES", "5000"},
                                 {"EAGERCOMM_TIMEOUT", "5m"},
                                 {"EAGERCOMM_SPIN", "1500us"},
                                 {"EAGERCOMM_DIRECT", "off"},
                                 {"EAGERCOMM_ALLREDUCE_ALGO", "RING"}});
  EXPECT_EQ(value_of(config, "EAGERCOMM_SLOT_BYTES"), "1MiB");
  EXPECT_EQ(value_of(config, "EAGERCOMM_CHAIN_MIN_BYTES"), "5000");
  EXPECT_EQ(value_of(config, "EAGERCOMM_TIMEOUT"), "300s");
  EXPECT_EQ(value_of(config, "EAGERCOMM_SPIN"), "1500us");
  EXPECT_EQ(value_of(config, "EAGERCOMM_DIRECT"), "0");
  EXPECT_EQ(value_of(config, "EAGERCOMM_ALLREDUCE_ALGO"), "ring");
}

TEST(ConfigDescribe, EveryFormattedValueParsesBack) {
  Config config = load_ok({{"EAGERCOMM_SLOT_BYTES", "12345"},
                           {"EAGERCOMM_TIMEOUT", "7ns"},
                           {"EAGERCOMM_LOG_SUBSYS", "^mem"},
                           {"EAGERCOMM_LOG_FILE", "x.%p"},
                           {"EAGERCOMM_DIRECT", "no"}});
  const std::vector<Config::Row> rows = config.describe();
  Config copy;
  for (const Config::Row& row : rows) {
    ASSERT_TRUE(copy.set(row.name, row.value).ok()) << row.name << "=" << row.value;
  }
  const std::vector<Config::Row> again = copy.describe();
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(again[i].value, rows[i].value);
}

// ---- parse_size / parse_duration / format ----

TEST(ParseSize, Accepted) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"4096", 4096},
      {"4096b", 4096},
      {"4096B", 4096},
      {"256k", 256 << 10},
      {"256K", 256 << 10},
      {"256KiB", 256 << 10},
      {"256kib", 256 << 10},
      {"256kb", 256 << 10},
      {"256KB", 256 << 10},
      {"1M", 1 << 20},
      {"1MiB", 1 << 20},
      {"1g", uint64_t{1} << 30},
      {"3GiB", uint64_t{3} << 30},
      {"2t", uint64_t{2} << 40},
      {"15EiB", uint64_t{15} << 60},
      {"18446744073709551615", std::numeric_limits<uint64_t>::max()},
  };
  for (const auto& [text, bytes] : cases) {
    Result<size_t> size = parse_size(text);
    ASSERT_TRUE(size.ok()) << text << ": " << size.status().to_string();
    EXPECT_EQ(*size, bytes) << text;
  }
}

TEST(ParseSize, Rejected) {
  for (const char* text : {"",
                           " ",
                           "-1",
                           "+1",
                           "1.5k",
                           "1,5k",
                           "k",
                           "KiB",
                           "12x",
                           "1 k",
                           " 1",
                           "1k ",
                           "1kib2",
                           "1kk",
                           "1ib",
                           "0x10",
                           "1e3",
                           "16EiB",
                           "18446744073709551616",
                           "99999999999999999999k",
                           "1\n"}) {
    Result<size_t> size = parse_size(text);
    EXPECT_FALSE(size.ok()) << "'" << text << "' parsed as " << (size.ok() ? *size : 0);
    if (!size.ok()) {
      EXPECT_EQ(size.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(parse_size("1.5k").status().message(),
            "'1.5k' is not a size: fractions are not supported; use a smaller unit");
  EXPECT_EQ(parse_size("16EiB").status().message(), "'16EiB' is not a size: too large");
  EXPECT_EQ(parse_size("").status().message(), "'' is not a size: empty");
}

TEST(ParseDuration, Accepted) {
  const std::vector<std::pair<std::string, nanoseconds>> cases = {
      {"0", nanoseconds(0)},
      {"0ms", nanoseconds(0)},
      {"20us", microseconds(20)},
      {"5ms", milliseconds(5)},
      {"30s", seconds(30)},
      {"30S", seconds(30)},
      {"2m", minutes(2)},
      {"1h", hours(1)},
      {"7", seconds(7)},
      {"15ns", nanoseconds(15)},
      {"9223372036854775807ns", nanoseconds(std::numeric_limits<int64_t>::max())},
  };
  for (const auto& [text, expected] : cases) {
    Result<nanoseconds> d = parse_duration(text);
    ASSERT_TRUE(d.ok()) << text << ": " << d.status().to_string();
    EXPECT_EQ(*d, expected) << text;
  }
}

TEST(ParseDuration, Rejected) {
  for (const char* text :
       {"", " ", "-1", "-1s", "+1s", "1.5s", "5 ms", "5sec", "ms", "5d", "5us ", "s5",
        "9223372036854775808ns", "9223372037s", "2562048h", "99999999999999999999"}) {
    Result<nanoseconds> d = parse_duration(text);
    EXPECT_FALSE(d.ok()) << "'" << text << "' parsed as " << (d.ok() ? d->count() : 0) << "ns";
  }
  EXPECT_EQ(parse_duration("9223372037s").status().message(),
            "'9223372037s' is not a duration: too large");
}

TEST(FormatSize, ExactBinaryUnitsOrBytes) {
  EXPECT_EQ(format_size(0), "0");
  EXPECT_EQ(format_size(1), "1");
  EXPECT_EQ(format_size(1000), "1000");
  EXPECT_EQ(format_size(1024), "1KiB");
  EXPECT_EQ(format_size(1536), "1536");
  EXPECT_EQ(format_size(256 << 10), "256KiB");
  EXPECT_EQ(format_size(1536 << 10), "1536KiB");
  EXPECT_EQ(format_size(64 << 20), "64MiB");
  EXPECT_EQ(format_size(size_t{1} << 30), "1GiB");
  EXPECT_EQ(format_size(size_t{5} << 40), "5TiB");
  EXPECT_EQ(format_size(size_t{1} << 60), "1EiB");
  EXPECT_EQ(format_size(std::numeric_limits<size_t>::max()), "18446744073709551615");
}

TEST(FormatDuration, LargestExactUnitUpToSeconds) {
  EXPECT_EQ(format_duration(nanoseconds(0)), "0");
  EXPECT_EQ(format_duration(nanoseconds(7)), "7ns");
  EXPECT_EQ(format_duration(nanoseconds(1001)), "1001ns");
  EXPECT_EQ(format_duration(microseconds(20)), "20us");
  EXPECT_EQ(format_duration(microseconds(1500)), "1500us");
  EXPECT_EQ(format_duration(milliseconds(5)), "5ms");
  EXPECT_EQ(format_duration(seconds(300)), "300s");
  EXPECT_EQ(format_duration(hours(2)), "7200s");
}

TEST(FormatParse, RoundTrips) {
  for (uint64_t bytes :
       {uint64_t{0}, uint64_t{1}, uint64_t{999}, uint64_t{4096}, uint64_t{12345}, uint64_t{3} << 20,
        (uint64_t{3} << 20) + 1, uint64_t{7} << 50, std::numeric_limits<uint64_t>::max()}) {
    Result<size_t> back = parse_size(format_size(bytes));
    ASSERT_TRUE(back.ok()) << format_size(bytes);
    EXPECT_EQ(*back, bytes);
  }
  for (int64_t ns :
       {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{20000}, int64_t{5000000},
        int64_t{300} * 1000000000, int64_t{1234567}, std::numeric_limits<int64_t>::max()}) {
    Result<nanoseconds> back = parse_duration(format_duration(nanoseconds(ns)));
    ASSERT_TRUE(back.ok()) << format_duration(nanoseconds(ns));
    EXPECT_EQ(back->count(), ns);
  }
}

// ---- the process environment ----

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
  const char* name;
};

TEST(ConfigEnviron, FromEnvironReadsThisProcess) {
  ScopedEnv slots("EAGERCOMM_SLOTS", "12");
  ScopedEnv typo("EAGERCOMM_SLOTZ", "1");
  Result<Config> config = Config::from_environ();
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->slots, 12u);
  EXPECT_EQ(config->source_of("EAGERCOMM_SLOTS"), ConfigSource::kEnvironment);
  EXPECT_EQ(config->unknown_names, std::vector<std::string>{"EAGERCOMM_SLOTZ"});
  {
    ScopedEnv bad("EAGERCOMM_SPIN", "forever");
    EXPECT_FALSE(Config::from_environ().ok());
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// process() is once per process, so each case runs in a forked child with its own environment.
// The child reports failures through its exit code and stderr.
TEST(ConfigProcessDeathTest, LoadsOnceAppliesLoggingAndWarnsAboutUnknownNames) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // The temporary directory belongs to the child: the "threadsafe" style re-runs the
        // test body there, so anything the parent made would not be the child's.
        char dir_template[] = "/tmp/config_test_XXXXXX";
        if (mkdtemp(dir_template) == nullptr) std::exit(2);
        const std::string dir = dir_template;
        setenv("EAGERCOMM_LOG_FILE", (dir + "/log.%p").c_str(), 1);
        setenv("EAGERCOMM_LOG_LEVEL", "info", 1);
        setenv("EAGERCOMM_TIMOUT", "5s", 1);
        setenv("EAGERCOMM_SLOTS", "4", 1);
        std::atomic<const Result<Config>*> seen[8] = {};
        std::vector<std::thread> threads;
        for (auto& slot : seen) threads.emplace_back([&slot] { slot = &Config::process(); });
        for (auto& t : threads) t.join();
        const Result<Config>& config = Config::process();
        bool good = config.ok() && config->slots == 4;
        for (auto& slot : seen) good = good && slot.load() == &config;
        good = good && log_enabled(LogLevel::kInfo, log_subsys::kNet);
        const std::string log = read_file(dir + "/log." + std::to_string(getpid()));
        good = good && log.find(
                           " WARN init: ignoring unknown variable EAGERCOMM_TIMOUT (did you "
                           "mean EAGERCOMM_TIMEOUT?)\n") != std::string::npos;
        if (!good) std::fprintf(stderr, "log was: %s\n", log.c_str());
        if (std::system(("rm -rf " + dir).c_str()) != 0) good = false;
        std::exit(good ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ConfigProcessDeathTest, BadEnvironmentGivesTheSameErrorEveryTime) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("EAGERCOMM_TRANSPORT", "tcp", 1);
        const Result<Config>& first = Config::process();
        unsetenv("EAGERCOMM_TRANSPORT");  // too late: the environment was read once
        const Result<Config>& second = Config::process();
        const bool good =
            !first.ok() && &first == &second &&
            first.status().code() == StatusCode::kInvalidArgument &&
            first.status().message() ==
                "EAGERCOMM_TRANSPORT='tcp' is not one of auto|inproc|shm|ucx|verbs|sim";
        std::exit(good ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ConfigProcessDeathTest, UnopenableLogFileIsAConfigurationError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("EAGERCOMM_LOG_FILE", "/nonexistent-eagercomm-dir/log", 1);
        const Result<Config>& config = Config::process();
        const bool good =
            !config.ok() && config.status().code() == StatusCode::kIoError &&
            config.status().message().find("/nonexistent-eagercomm-dir/log") != std::string::npos;
        std::exit(good ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace eagercomm
