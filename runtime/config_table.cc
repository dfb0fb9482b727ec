// The table's engine: parsers per kind, range checks, the error and accepted texts, and
// load / set / describe over the row groups the library lists (collectives/config.cc).
#include "runtime/config_table.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <span>
#include <utility>

#include "runtime/log.h"

extern char** environ;  // POSIX: the process environment, declared by no standard header.

namespace eagercomm {
namespace {

using std::chrono::nanoseconds;
using Kind = ConfigKind;
using Variable = ConfigRow;
using Parsed = ConfigParsed;
using namespace config_units;

constexpr std::string_view kPrefix = "EAGERCOMM_";
// Even index: true, odd index: false.
constexpr std::string_view kBoolNames[] = {"1", "0", "true", "false", "yes", "no", "on", "off"};

// A row found by name, with the group that knows where its field lives.
struct Found {
  const ConfigRow* row = nullptr;
  const ConfigGroup* group = nullptr;
};

Found find_variable(std::span<const ConfigGroup> groups, std::string_view name) {
  for (const ConfigGroup& group : groups) {
    for (const ConfigRow& row : group.rows) {
      if (row.name == name) return {&row, &group};
    }
  }
  return {};
}

// ---- parsers: each returns the value or a Status whose message says why, not what ----

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

bool starts_with_digit(std::string_view text) {
  return !text.empty() && text[0] >= '0' && text[0] <= '9';
}

Status why(std::string_view reason) {
  return Status(StatusCode::kInvalidArgument, std::string(reason));
}

constexpr std::string_view kSizeSyntax =
    "expected a whole number of bytes with an optional binary unit (4096, 256k, 256KiB, 1M, 1g)";
constexpr std::string_view kDurationSyntax =
    "expected a whole number with a unit ns, us, ms, s, m or h (20us, 5ms, 30s; a bare number "
    "is seconds)";
constexpr std::string_view kFraction = "fractions are not supported; use a smaller unit";

// The leading decimal digits of `text` as a number; `rest` gets what follows them.
Result<uint64_t> leading_number(std::string_view text, std::string_view syntax,
                                std::string_view& rest) {
  if (text.empty()) return why("empty");
  if (!starts_with_digit(text)) return why(syntax);
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range) return why("too large");
  rest = text.substr(static_cast<size_t>(end - text.data()));
  if (!rest.empty() && rest[0] == '.') return why(kFraction);
  return n;
}

Result<uint64_t> parse_size_bytes(std::string_view text) {
  std::string_view rest;
  EC_ASSIGN_OR_RETURN(const uint64_t n, leading_number(text, kSizeSyntax, rest));
  unsigned shift = 0;
  if (!rest.empty()) {
    constexpr std::string_view kUnitLetters = "kmgtpe";  // KiB .. EiB
    const size_t unit = kUnitLetters.find(lower(rest[0]));
    if (unit != std::string_view::npos) {
      shift = 10 * static_cast<unsigned>(unit + 1);
      rest.remove_prefix(1);
    }
    // After the letter: nothing, "b" or "ib" ("256k", "256kb", "256KiB"); alone: "b" (bytes).
    const bool ok = (shift != 0 && (rest.empty() || iequals(rest, "ib"))) || iequals(rest, "b");
    if (!ok) return why(kSizeSyntax);
  }
  if (n > (std::numeric_limits<uint64_t>::max() >> shift) ||
      (n << shift) > std::numeric_limits<size_t>::max()) {
    return why("too large");
  }
  return n << shift;
}

Result<uint64_t> parse_duration_ns(std::string_view text) {
  struct Unit {
    std::string_view suffix;
    uint64_t ns;
  };
  static constexpr Unit kUnits[] = {{"", kNsPerSecond},        {"ns", 1},
                                    {"us", kNsPerUs},          {"ms", kNsPerMs},
                                    {"s", kNsPerSecond},       {"m", 60 * kNsPerSecond},
                                    {"h", 3600 * kNsPerSecond}};
  std::string_view rest;
  EC_ASSIGN_OR_RETURN(const uint64_t n, leading_number(text, kDurationSyntax, rest));
  for (const Unit& unit : kUnits) {
    if (!iequals(rest, unit.suffix)) continue;
    if (n > static_cast<uint64_t>(std::numeric_limits<nanoseconds::rep>::max()) / unit.ns) {
      return why("too large");
    }
    return n * unit.ns;
  }
  return why(kDurationSyntax);
}

Result<uint64_t> parse_integer(std::string_view text) {
  std::string_view rest;
  EC_ASSIGN_OR_RETURN(const uint64_t n, leading_number(text, "expected decimal digits", rest));
  if (!rest.empty()) return why("expected decimal digits");
  return n;
}

Result<uint64_t> parse_choice(std::string_view text, std::span<const std::string_view> choices) {
  for (size_t i = 0; i < choices.size(); ++i) {
    if (iequals(text, choices[i])) return static_cast<uint64_t>(i);
  }
  return why("not a choice");
}

// The parser of each kind, plus the range check the row asks for.
Result<Parsed> parse_value(const Variable& var, std::string_view text) {
  Result<uint64_t> number = uint64_t{0};
  switch (var.kind) {
    case Kind::kString:
      return Parsed{0, std::string(text)};
    case Kind::kSubsysList: {
      Result<uint32_t> mask = log_parse_subsys(text);
      if (!mask.ok()) return mask.status();
      return Parsed{0, std::string(text)};
    }
    case Kind::kEnum:
      number = parse_choice(text, var.choices);
      break;
    case Kind::kBool: {
      number = parse_choice(text, kBoolNames);
      if (number.ok()) *number = *number % 2 == 0 ? 1 : 0;
      break;
    }
    case Kind::kSize:
      number = parse_size_bytes(text);
      break;
    case Kind::kDuration:
      number = parse_duration_ns(text);
      break;
    case Kind::kInt:
      if (var.allows_auto && text == "auto") return Parsed{var.field.type_max, {}};
      number = parse_integer(text);
      break;
  }
  if (!number.ok()) return number.status();
  if (*number < var.min || *number > std::min(var.max, var.field.type_max)) {
    return why("out of range");
  }
  return Parsed{*number, {}};
}

std::string format_bound(const Variable& var, uint64_t value) {
  if (var.kind == Kind::kSize) return format_size(value);
  if (var.kind == Kind::kDuration) {
    return format_duration(nanoseconds(static_cast<nanoseconds::rep>(value)));
  }
  return std::to_string(value);
}

// What a row accepts, as describe() shows it: "size (4KiB..64MiB)", "auto|on|off", ...
std::string accepted_text(const Variable& var) {
  const auto join = [](std::span<const std::string_view> names, std::string_view sep) {
    std::string out;
    for (std::string_view name : names) {
      if (!out.empty()) out += sep;
      out += name;
    }
    return out;
  };
  const auto with_range = [&var](std::string noun) {
    if (var.min != 0 || var.max != kUnbounded) {
      noun += " (" + format_bound(var, var.min) + "..";
      noun += (var.max == kUnbounded ? std::string() : format_bound(var, var.max)) + ")";
    }
    return noun;
  };
  switch (var.kind) {
    case Kind::kEnum:
      return join(var.choices, "|");
    case Kind::kBool:
      return join(kBoolNames, "|");
    case Kind::kSize:
      return with_range("size");
    case Kind::kDuration:
      return with_range("duration");
    case Kind::kInt:
      return var.allows_auto ? "auto or " + with_range("integer") : with_range("integer");
    case Kind::kString:
      return std::string(var.note);
    case Kind::kSubsysList: {
      std::string out = "all or comma list of ";
      for (int i = 0; i < kLogSubsysCount; ++i) {
        if (i != 0) out += ',';
        out += log_subsys_name(static_cast<LogSubsys>(i));
      }
      return out + "; leading ^: all but those";
    }
  }
  return {};
}

// The user-facing error: "EAGERCOMM_TRANSPORT='tcp' is not one of auto|inproc|shm|ucx|verbs".
std::string bad_value_message(const Variable& var, std::string_view text, const Status& reason) {
  std::string out(var.name);
  out += "='";
  out += text;
  out += "' is not ";
  switch (var.kind) {
    case Kind::kEnum:
    case Kind::kBool:
      return out + "one of " + accepted_text(var);
    case Kind::kSubsysList:  // the reason lists the accepted names itself
      return out + "a subsystem list: " + reason.message();
    case Kind::kInt:
      if (var.allows_auto) {  // accepted_text() says "auto or integer (..)"
        return out + "auto or an " + accepted_text(var).substr(8) + ": " + reason.message();
      }
      return out + "an " + accepted_text(var) + ": " + reason.message();
    default:
      return out + "a " + accepted_text(var) + ": " + reason.message();
  }
}

// Parses `text` for `var` and stores it into `config`; the error is bad_value_message().
Status assign(const Variable& var, std::string_view text, void* section) {
  Result<Parsed> parsed = parse_value(var, text);
  if (!parsed.ok()) {
    return Status(StatusCode::kInvalidArgument, bad_value_message(var, text, parsed.status()));
  }
  var.field.store(var, *parsed, section);
  return Status::Ok();
}

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("TIMOEUT").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> two_back(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], two_back[j - 2] + 1);
      }
    }
    std::swap(two_back, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const char* source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::kDefault:
      return "default";
    case ConfigSource::kEnvironment:
      return "environment";
    case ConfigSource::kOverride:
      return "override";
  }
  return "unknown";
}

}  // namespace

Result<size_t> parse_size(std::string_view text) {
  Result<uint64_t> bytes = parse_size_bytes(text);
  if (!bytes.ok()) {
    return Status(StatusCode::kInvalidArgument,
                  "'" + std::string(text) + "' is not a size: " + bytes.status().message());
  }
  return static_cast<size_t>(*bytes);
}

Result<nanoseconds> parse_duration(std::string_view text) {
  Result<uint64_t> ns = parse_duration_ns(text);
  if (!ns.ok()) {
    return Status(StatusCode::kInvalidArgument,
                  "'" + std::string(text) + "' is not a duration: " + ns.status().message());
  }
  return nanoseconds(static_cast<nanoseconds::rep>(*ns));
}

std::string format_size(size_t bytes) {
  static constexpr std::string_view kUnits[] = {"EiB", "PiB", "TiB", "GiB", "MiB", "KiB"};
  if (bytes == 0) return "0";
  const auto value = static_cast<uint64_t>(bytes);
  for (size_t i = 0; i < std::size(kUnits); ++i) {
    const unsigned shift = 10 * static_cast<unsigned>(std::size(kUnits) - i);
    const uint64_t unit = uint64_t{1} << shift;
    if (value % unit == 0) return std::to_string(value >> shift) + std::string(kUnits[i]);
  }
  return std::to_string(value);
}

std::string format_duration(nanoseconds d) {
  // Seconds at most, never minutes or hours: "300s" reads as the timeout users typed and
  // lines up with the defaults; parse_duration still accepts "5m" and "1h".
  struct Unit {
    std::string_view suffix;
    int64_t ns;
  };
  static constexpr Unit kUnits[] = {{"s", static_cast<int64_t>(kNsPerSecond)},
                                    {"ms", static_cast<int64_t>(kNsPerMs)},
                                    {"us", static_cast<int64_t>(kNsPerUs)}};
  const int64_t count = d.count();
  if (count == 0) return "0";
  for (const Unit& unit : kUnits) {
    if (count % unit.ns == 0) return std::to_string(count / unit.ns) + std::string(unit.suffix);
  }
  return std::to_string(count) + "ns";
}

ConfigSource ConfigRecord::source_of(std::string_view name) const {
  const auto it = sources_.find(name);
  return it == sources_.end() ? ConfigSource::kDefault : it->second;
}

void ConfigRecord::set_source(std::string_view name, ConfigSource source) {
  sources_[std::string(name)] = source;
}

std::map<std::string, std::string> config_environ() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (!text.starts_with(kPrefix)) continue;
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

Status config_load(std::span<const ConfigGroup> groups,
                   const std::map<std::string, std::string>& env, void* whole,
                   ConfigRecord* record) {
  std::string errors;
  // Table order, so that errors read in the same order as eagercomm-info's rows.
  for (const ConfigGroup& group : groups) {
    for (const ConfigRow& var : group.rows) {
      const auto it = env.find(std::string(var.name));
      if (it == env.end()) continue;
      Status status = assign(var, it->second, group.section(whole));
      if (!status.ok()) {
        if (!errors.empty()) errors += "; ";
        errors += status.message();
        continue;
      }
      if (record != nullptr) record->set_source(var.name, ConfigSource::kEnvironment);
    }
  }
  if (record != nullptr) {
    for (const auto& [name, value] : env) {
      if (name.starts_with(kPrefix) && find_variable(groups, name).row == nullptr) {
        record->unknown_names.push_back(name);
      }
    }
  }
  if (!errors.empty()) return Status(StatusCode::kInvalidArgument, std::move(errors));
  return Status::Ok();
}

Status config_set(std::span<const ConfigGroup> groups, std::string_view name,
                  std::string_view value, void* whole, ConfigRecord& record) {
  const Found found = find_variable(groups, name);
  if (found.row == nullptr) {
    std::string message = "unknown variable " + std::string(name);
    if (const std::string hint = config_suggest_name(groups, name); !hint.empty()) {
      message += " (did you mean " + hint + "?)";
    }
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  EC_RETURN_IF_ERROR(assign(*found.row, value, found.group->section(whole)));
  record.set_source(found.row->name, ConfigSource::kOverride);
  return Status::Ok();
}

std::vector<ConfigRecord::Row> config_describe(std::span<const ConfigGroup> groups,
                                               const void* whole, const ConfigRecord& record) {
  std::vector<ConfigRecord::Row> rows;
  for (const ConfigGroup& group : groups) {
    // section() only adjusts the pointer; the row's format() reads through it.
    const void* section = group.section(const_cast<void*>(whole));
    for (const ConfigRow& var : group.rows) {
      std::string value = var.field.format(var, section);
      if (var.secret && !value.empty()) value = "(set, not shown)";
      rows.push_back(ConfigRecord::Row{std::string(var.name), std::move(value),
                                       source_name(record.source_of(var.name)), accepted_text(var),
                                       std::string(var.doc), std::string(var.default_text)});
    }
  }
  return rows;
}

std::string config_suggest_name(std::span<const ConfigGroup> groups,
                                std::string_view unknown_name) {
  constexpr size_t kMaxDistance = 2;
  const ConfigRow* best = nullptr;
  size_t best_distance = kMaxDistance + 1;
  for (const ConfigGroup& group : groups) {
    for (const ConfigRow& var : group.rows) {
      const size_t d = edit_distance(unknown_name, var.name);
      if (d < best_distance) {
        best = &var;
        best_distance = d;
      }
    }
  }
  return best != nullptr ? std::string(best->name) : std::string();
}

}  // namespace eagercomm
