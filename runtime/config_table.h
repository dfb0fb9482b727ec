// The machinery of the EAGERCOMM_* table; the rows themselves belong to the layers.
//
// Each layer keeps its knobs in a struct of its own (RuntimeConfig here, TransportConfig,
// VerbsConfig, CollectiveConfig above) and declares one row per knob (name, kind, default text,
// range, doc) next to it, bound to the field with config_field<&Section::member>(). The library
// composes the layers' structs into the one Config and lists their row groups, in the order
// eagercomm-info prints them, in one place (collectives/config.cc). The runtime parses, checks,
// formats and describes rows without knowing which layer a row belongs to.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/status.h"

namespace eagercomm {

// Where a variable's value in force came from.
enum class ConfigSource : uint8_t { kDefault, kEnvironment, kOverride };

namespace config_units {
inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kNsPerUs = 1000;
inline constexpr uint64_t kNsPerMs = 1000 * kNsPerUs;
inline constexpr uint64_t kNsPerSecond = 1000 * kNsPerMs;
inline constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();
}  // namespace config_units

enum class ConfigKind : uint8_t { kEnum, kBool, kSize, kDuration, kInt, kString, kSubsysList };

// What a kind's parser produced: a number (enum index, 0/1, bytes, nanoseconds, integer) or,
// for strings and lists, the text as written.
struct ConfigParsed {
  uint64_t number = 0;
  std::string text;
};

struct ConfigRow;

// How a row reaches its field inside its layer's struct (`section`); generated for each field
// by config_field<&Section::member>().
struct ConfigFieldAccess {
  void (*store)(const ConfigRow& row, const ConfigParsed& value, void* section);
  std::string (*format)(const ConfigRow& row, const void* section);
  // The largest number the field's type holds: the parsers never let a value past it, so a
  // row cannot overflow its field even when its own range is wider.
  uint64_t type_max;
};

struct ConfigRow {
  std::string_view name;
  ConfigKind kind;
  // Must parse to the initializer of the member (config_test checks every row).
  std::string_view default_text;
  std::span<const std::string_view> choices = {};  // kEnum: names, index = enum value
  uint64_t min = 0;  // kSize (bytes), kDuration (ns), kInt: inclusive range
  uint64_t max = config_units::kUnbounded;
  std::string_view note = {};  // kString: what the text means, shown as the accepted text
  std::string_view doc;
  ConfigFieldAccess field;
  bool secret = false;       // describe() shows whether it is set, never the value
  bool allows_auto = false;  // kInt: "auto" is accepted too, stored as the field type's maximum
};

// "1M" style for printing: exact binary units when exact ("256KiB"), bytes otherwise.
std::string format_size(size_t bytes);
std::string format_duration(std::chrono::nanoseconds d);

namespace config_detail {

template <class T>
constexpr bool kIsNumberField = std::is_unsigned_v<T> && !std::is_same_v<T, bool>;

template <class T>
void store_value(const ConfigRow& row, const ConfigParsed& v, T& field) {
  if constexpr (std::is_same_v<T, std::string>) {
    // Enum-valued strings (the transport) keep the canonical lower-case name, not the user's.
    field = row.kind == ConfigKind::kEnum ? std::string(row.choices[v.number]) : v.text;
  } else if constexpr (std::is_same_v<T, std::chrono::nanoseconds>) {
    field = std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(v.number));
  } else if constexpr (std::is_same_v<T, bool>) {
    field = v.number != 0;
  } else {
    static_assert(std::is_enum_v<T> || kIsNumberField<T>, "the table cannot hold this field type");
    field = static_cast<T>(v.number);
  }
}

template <class T>
std::string format_value(const ConfigRow& row, const T& field) {
  if constexpr (std::is_same_v<T, std::string>) {
    return field;
  } else if constexpr (std::is_same_v<T, std::chrono::nanoseconds>) {
    return format_duration(field);
  } else if constexpr (std::is_same_v<T, bool>) {
    return field ? "1" : "0";
  } else if constexpr (std::is_enum_v<T>) {
    const auto index = static_cast<size_t>(field);
    return index < row.choices.size() ? std::string(row.choices[index]) : std::to_string(index);
  } else {
    static_assert(kIsNumberField<T>, "the table cannot hold this field type");
    if (row.allows_auto && field == std::numeric_limits<T>::max()) return "auto";
    return row.kind == ConfigKind::kSize ? format_size(field) : std::to_string(field);
  }
}

template <class T>
constexpr uint64_t type_max() {
  if constexpr (kIsNumberField<T>) {
    return std::numeric_limits<T>::max();
  } else if constexpr (std::is_same_v<T, std::chrono::nanoseconds>) {
    return static_cast<uint64_t>(std::numeric_limits<std::chrono::nanoseconds::rep>::max());
  } else {
    return config_units::kUnbounded;  // enums and bools are bounded by their choices
  }
}

template <class>
struct MemberOf;
template <class Section, class T>
struct MemberOf<T Section::*> {
  using Class = Section;
  using Type = T;
};

}  // namespace config_detail

// The accessor of a row bound to `Member` (&VerbsConfig::ib_port): the row's section pointer is
// a Section*.
template <auto Member>
constexpr ConfigFieldAccess config_field() {
  using Section = typename config_detail::MemberOf<decltype(Member)>::Class;
  using T = typename config_detail::MemberOf<decltype(Member)>::Type;
  return ConfigFieldAccess{
      [](const ConfigRow& row, const ConfigParsed& v, void* section) {
        config_detail::store_value(row, v, static_cast<Section*>(section)->*Member);
      },
      [](const ConfigRow& row, const void* section) {
        return config_detail::format_value(row, static_cast<const Section*>(section)->*Member);
      },
      config_detail::type_max<T>()};
}

// A layer's rows and where its struct lies inside the composed config (`whole`).
struct ConfigGroup {
  std::span<const ConfigRow> rows;
  void* (*section)(void* whole);
};

// The group of `rows`, bound to the Section part of a Whole (a struct derived from Section, or
// Section itself).
template <class Whole, class Section>
ConfigGroup config_group(std::span<const ConfigRow> rows) {
  static_assert(std::is_base_of_v<Section, Whole> || std::is_same_v<Section, Whole>);
  return ConfigGroup{
      rows, [](void* whole) -> void* { return static_cast<Section*>(static_cast<Whole*>(whole)); }};
}

// The bookkeeping of a loaded table: where each value came from and the names nobody knows.
// The composed Config derives from it.
class ConfigRecord {
 public:
  // One row per variable, in table order, for eagercomm-info.
  struct Row {
    std::string name;      // "EAGERCOMM_SLOT_BYTES"
    std::string value;     // the value in force, formatted ("256KiB", "20us", "warn")
    std::string source;    // "default", "environment", "override"
    std::string accepted;  // "auto|inproc|shm|ucx|verbs", "size (4KiB..64MiB)", ...
    std::string doc;
    std::string default_value;  // the table's default text ("256KiB"); parses to the default
  };

  // EAGERCOMM_* names found in the environment given to load() that the table does not know.
  std::vector<std::string> unknown_names;

  ConfigSource source_of(std::string_view name) const;
  void set_source(std::string_view name, ConfigSource source);

 private:
  std::map<std::string, ConfigSource, std::less<>> sources_;
};

// The EAGERCOMM_* entries of this process's environment.
std::map<std::string, std::string> config_environ();

// Parses `env` (only its EAGERCOMM_* entries matter) into `whole`, group by group in table
// order. Errors name the variable, the bad value and the accepted values; all bad variables
// are reported in one Status. `record` (nullable) gets the sources and the unknown names.
Status config_load(std::span<const ConfigGroup> groups,
                   const std::map<std::string, std::string>& env, void* whole,
                   ConfigRecord* record);
// Sets one variable by name (source kOverride), with the same checks; unknown names are an
// error with a did-you-mean hint.
Status config_set(std::span<const ConfigGroup> groups, std::string_view name,
                  std::string_view value, void* whole, ConfigRecord& record);
std::vector<ConfigRecord::Row> config_describe(std::span<const ConfigGroup> groups,
                                               const void* whole, const ConfigRecord& record);
// The known variable nearest to `unknown_name` (optimal-string-alignment edit distance at
// most 2, first in table order on ties), or "" when none is that close.
std::string config_suggest_name(std::span<const ConfigGroup> groups, std::string_view unknown_name);

// Helpers shared with command-line parsing (bench flags use the same units as the table).
// "256k", "256KiB", "1M", "64MiB", "4096" -> bytes.
Result<size_t> parse_size(std::string_view text);
// "20us", "5ms", "30s", "2m", "0" -> duration (a bare number means seconds).
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

}  // namespace eagercomm
