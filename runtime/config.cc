// The EAGERCOMM_* table: one row per variable, a small parser per kind, and an accessor per
// Config field. Adding a variable is one row in kVariables plus one field in Config.
#include "runtime/config.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "runtime/log.h"

extern char** environ;  // POSIX: the process environment, declared by no standard header.

namespace eagercomm {
namespace {

using std::chrono::nanoseconds;

constexpr std::string_view kPrefix = "EAGERCOMM_";
constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kNsPerUs = 1000;
constexpr uint64_t kNsPerMs = 1000 * kNsPerUs;
constexpr uint64_t kNsPerSecond = 1000 * kNsPerMs;
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

enum class Kind : uint8_t { kEnum, kBool, kSize, kDuration, kInt, kString, kSubsysList };

// What a kind's parser produced: a number (enum index, 0/1, bytes, nanoseconds, integer) or,
// for strings and lists, the text as written.
struct Parsed {
  uint64_t number = 0;
  std::string text;
};

struct Variable;

// How a row reaches its Config field; generated for each field by field<&Config::member>().
struct FieldAccess {
  void (*store)(const Variable& var, const Parsed& value, Config& config);
  std::string (*format)(const Variable& var, const Config& config);
  // The largest number the field's type holds: the parsers never let a value past it, so a
  // row cannot overflow its field even when its own range is wider.
  uint64_t type_max;
};

struct Variable {
  std::string_view name;
  Kind kind;
  // Must parse to the initializer of the Config member (config_test checks every row).
  std::string_view default_text;
  std::span<const std::string_view> choices = {};  // kEnum: names, index = enum value
  uint64_t min = 0;  // kSize (bytes), kDuration (ns), kInt: inclusive range
  uint64_t max = kUnbounded;
  std::string_view note = {};  // kString: what the text means, shown as the accepted text
  std::string_view doc;
  FieldAccess field;
  bool secret = false;       // describe() shows whether it is set, never the value
  bool allows_auto = false;  // kInt: "auto" is accepted too, stored as the field type's maximum
};

// ---- field accessors: how each field type takes a parsed value and prints itself ----

template <class T>
constexpr bool kIsNumberField = std::is_unsigned_v<T> && !std::is_same_v<T, bool>;

template <class T>
void store_value(const Variable& var, const Parsed& v, T& field) {
  if constexpr (std::is_same_v<T, std::string>) {
    // Enum-valued strings (the transport) keep the canonical lower-case name, not the user's.
    field = var.kind == Kind::kEnum ? std::string(var.choices[v.number]) : v.text;
  } else if constexpr (std::is_same_v<T, nanoseconds>) {
    field = nanoseconds(static_cast<nanoseconds::rep>(v.number));
  } else if constexpr (std::is_same_v<T, bool>) {
    field = v.number != 0;
  } else {
    static_assert(std::is_enum_v<T> || kIsNumberField<T>, "the table cannot hold this field type");
    field = static_cast<T>(v.number);
  }
}

template <class T>
std::string format_value(const Variable& var, const T& field) {
  if constexpr (std::is_same_v<T, std::string>) {
    return field;
  } else if constexpr (std::is_same_v<T, nanoseconds>) {
    return format_duration(field);
  } else if constexpr (std::is_same_v<T, bool>) {
    return field ? "1" : "0";
  } else if constexpr (std::is_enum_v<T>) {
    const auto index = static_cast<size_t>(field);
    return index < var.choices.size() ? std::string(var.choices[index]) : std::to_string(index);
  } else {
    static_assert(kIsNumberField<T>, "the table cannot hold this field type");
    if (var.allows_auto && field == std::numeric_limits<T>::max()) return "auto";
    return var.kind == Kind::kSize ? format_size(field) : std::to_string(field);
  }
}

template <class T>
constexpr uint64_t type_max() {
  if constexpr (kIsNumberField<T>) {
    return std::numeric_limits<T>::max();
  } else if constexpr (std::is_same_v<T, nanoseconds>) {
    return static_cast<uint64_t>(std::numeric_limits<nanoseconds::rep>::max());
  } else {
    return kUnbounded;  // enums and bools are bounded by their choices
  }
}

template <auto Member>
constexpr FieldAccess field() {
  using T = std::remove_cvref_t<decltype(std::declval<Config&>().*Member)>;
  return FieldAccess{
      [](const Variable& var, const Parsed& v, Config& c) { store_value(var, v, c.*Member); },
      [](const Variable& var, const Config& c) { return format_value(var, c.*Member); },
      type_max<T>()};
}

// ---- the table ----

constexpr std::string_view kTransportNames[] = {"auto", "inproc", "shm", "ucx", "verbs"};
constexpr std::string_view kLogLevelNames[] = {"error", "warn", "info", "debug", "trace"};
constexpr std::string_view kProgressThreadNames[] = {"auto", "on", "off"};
constexpr std::string_view kAllreduceAlgoNames[] = {"auto", "rd", "ring", "direct"};
constexpr std::string_view kBroadcastAlgoNames[] = {"auto", "tree", "chain"};
constexpr std::string_view kIbConnectNames[] = {"auto", "cm", "store"};
constexpr std::string_view kIbMtuNames[] = {"auto", "256", "512", "1024", "2048", "4096"};
// Even index: true, odd index: false.
constexpr std::string_view kBoolNames[] = {"1", "0", "true", "false", "yes", "no", "on", "off"};

constexpr Variable kVariables[] = {
    {.name = "EAGERCOMM_TRANSPORT",
     .kind = Kind::kEnum,
     .default_text = "auto",
     .choices = kTransportNames,
     .doc = "transport between ranks; auto picks the best one available, set one to force a "
            "path when comparing transports or debugging",
     .field = field<&Config::transport>()},
    {.name = "EAGERCOMM_LOG_LEVEL",
     .kind = Kind::kEnum,
     .default_text = "warn",
     .choices = kLogLevelNames,
     .doc = "most verbose log level printed; info or debug show setup decisions, trace shows "
            "every message (slow)",
     .field = field<&Config::log_level>()},
    {.name = "EAGERCOMM_LOG_SUBSYS",
     .kind = Kind::kSubsysList,
     .default_text = "all",
     .doc = "subsystems whose log lines are printed (\"net,coll\", or \"^net\" for all but "
            "net); narrows debug output to the part under study",
     .field = field<&Config::log_subsys>()},
    {.name = "EAGERCOMM_LOG_FILE",
     .kind = Kind::kString,
     .default_text = "",
     .note = "path (%h host, %p pid, %% percent; empty: stderr)",
     .doc = "file the log is appended to instead of stderr; put %p in it to give each process "
            "of a job its own file",
     .field = field<&Config::log_file>()},
    {.name = "EAGERCOMM_TIMEOUT",
     .kind = Kind::kDuration,
     .default_text = "300s",
     .doc = "how long a blocking call waits for its peers before failing with a timeout (0: "
            "forever); raise it for slow job start-up, lower it to fail fast",
     .field = field<&Config::timeout>()},
    {.name = "EAGERCOMM_HEARTBEAT",
     .kind = Kind::kDuration,
     .default_text = "1s",
     .max = 60 * kNsPerSecond,
     .doc = "how often a rank tells its peers it is alive (at most EAGERCOMM_TIMEOUT/4 apart); "
            "a peer silent for EAGERCOMM_TIMEOUT is declared hung and every operation fails "
            "naming it, and timeouts report which ranks had not arrived; 0 turns both off",
     .field = field<&Config::heartbeat>()},
    {.name = "EAGERCOMM_SPIN",
     .kind = Kind::kDuration,
     .default_text = "100us",
     .max = kNsPerSecond,
     .doc = "how long an idle wait polls (pausing, then yielding the core) before it sleeps; "
            "about one sleep/wake-up costs here; 0 sleeps at once",
     .field = field<&Config::spin>()},
    {.name = "EAGERCOMM_PROGRESS_THREAD",
     .kind = Kind::kEnum,
     .default_text = "auto",
     .choices = kProgressThreadNames,
     .doc = "whether a background thread drives communication while ranks compute; auto "
            "starts it with the first partial allreduce (which needs it), off saves a core",
     .field = field<&Config::progress_thread>()},
    {.name = "EAGERCOMM_SLOT_BYTES",
     .kind = Kind::kSize,
     .default_text = "256KiB",
     .min = 4 * kKiB,
     .max = 64 * kMiB,
     .doc = "size of one mailbox slot, header included; bigger slots move large messages in "
            "fewer pieces, smaller ones use less memory per peer",
     .field = field<&Config::slot_bytes>()},
    {.name = "EAGERCOMM_SLOTS",
     .kind = Kind::kInt,
     .default_text = "8",
     .min = 2,
     .max = 64,
     .doc = "mailbox slots per peer pair; more lets more messages be in flight before a sender "
            "waits, at one slot of memory each",
     .field = field<&Config::slots>()},
    {.name = "EAGERCOMM_ALLREDUCE_ALGO",
     .kind = Kind::kEnum,
     .default_text = "auto",
     .choices = kAllreduceAlgoNames,
     .doc = "allreduce algorithm: rd (recursive doubling, small messages), ring (large ones) or "
            "direct (ranks sharing an address space read each other's buffers); auto chooses by "
            "EAGERCOMM_RD_MAX_BYTES and EAGERCOMM_DIRECT_MIN_BYTES",
     .field = field<&Config::allreduce_algo>()},
    {.name = "EAGERCOMM_RD_MAX_BYTES",
     .kind = Kind::kSize,
     .default_text = "16KiB",
     .max = 64 * kMiB,
     .doc = "largest allreduce that auto runs by recursive doubling (ring above it); tune to the "
            "network's latency/bandwidth crossover",
     .field = field<&Config::rd_max_bytes>()},
    {.name = "EAGERCOMM_DIRECT_MIN_BYTES",
     .kind = Kind::kSize,
     .default_text = "16KiB",
     .doc = "smallest allreduce that auto runs directly on peers' buffers when the transport maps "
            "them (inproc); below it recursive doubling's single exchange per step is faster",
     .field = field<&Config::direct_min_bytes>()},
    {.name = "EAGERCOMM_SMALL_MAX_BYTES",
     .kind = Kind::kSize,
     .default_text = "8KiB",
     .max = 64 * kKiB,
     .doc = "largest allreduce that auto exchanges through per-pair boxes in mapped memory (shm, "
            "inproc; up to 32 ranks): one cache line per peer, no mailbox or notification; the "
            "same limit lets a partial allreduce's rounds run through boxes of its own; 0 "
            "turns both off. Must be the same on every rank",
     .field = field<&Config::small_max_bytes>()},
    {.name = "EAGERCOMM_BCAST_ALGO",
     .kind = Kind::kEnum,
     .default_text = "auto",
     .choices = kBroadcastAlgoNames,
     .doc = "broadcast algorithm: tree (few hops, small messages) or chain (pipelined, large "
            "ones); auto chooses by EAGERCOMM_CHAIN_MIN_BYTES",
     .field = field<&Config::bcast_algo>()},
    {.name = "EAGERCOMM_CHAIN_MIN_BYTES",
     .kind = Kind::kSize,
     .default_text = "256KiB",
     .doc = "smallest broadcast that auto sends along a pipelined chain (tree below it); tune "
            "to the network's latency/bandwidth crossover",
     .field = field<&Config::chain_min_bytes>()},
    {.name = "EAGERCOMM_DIRECT",
     .kind = Kind::kBool,
     .default_text = "1",
     .doc = "store straight into a peer's mapped memory when the transport offers it; turn off "
            "to force the copy path when chasing a memory bug",
     .field = field<&Config::direct>()},
    // The verbs transport's device (issue #6); like NCCL_IB_HCA / UCX_NET_DEVICES.
    {.name = "EAGERCOMM_IB_HCA",
     .kind = Kind::kString,
     .default_text = "",
     .note = "RDMA device name as ibv_devices lists it (mlx5_0); empty: the first with an active "
             "port",
     .doc = "which RDMA device the verbs transport uses; eagercomm-info lists the devices here",
     .field = field<&Config::ib_hca>()},
    {.name = "EAGERCOMM_IB_PORT",
     .kind = Kind::kInt,
     .default_text = "0",
     .max = 255,
     .doc = "port of EAGERCOMM_IB_HCA (ports count from 1); 0: its first active port",
     .field = field<&Config::ib_port>()},
    {.name = "EAGERCOMM_IB_GID_INDEX",
     .kind = Kind::kInt,
     .default_text = "auto",
     .max = 255,
     .doc = "GID table index for RoCE (and IB with GRH); auto: the first RoCE v2 IPv4-mapped GID "
            "on Ethernet ports, none on InfiniBand ports",
     .field = field<&Config::ib_gid_index>(),
     .allows_auto = true},
    {.name = "EAGERCOMM_IB_CONNECT",
     .kind = Kind::kEnum,
     .default_text = "auto",
     .choices = kIbConnectNames,
     .doc = "how verbs queue pairs are connected: cm uses rdma_cm on the IP address of the "
            "device (IPoIB / RoCE), store exchanges QP numbers, LID/GID and PSNs through the "
            "bootstrap store; auto: cm when the device has an IP address and the peer offers "
            "cm too, else store",
     .field = field<&Config::ib_connect>()},
    // Like NCCL_IB_TIMEOUT / _RETRY_CNT / _SL / _TC; the same on the cm and store paths.
    {.name = "EAGERCOMM_IB_TIMEOUT",
     .kind = Kind::kInt,
     .default_text = "18",
     .min = 1,
     .max = 31,
     .doc = "verbs ACK timeout per try, IB-encoded: 4.096 us x 2^value (18: 1.07 s); a dead peer "
            "is found after (EAGERCOMM_IB_RETRY_CNT + 1) tries. Lower finds it sooner; too low "
            "fails healthy peers on a congested fabric",
     .field = field<&Config::ib_timeout>()},
    {.name = "EAGERCOMM_IB_RETRY_CNT",
     .kind = Kind::kInt,
     .default_text = "7",
     .max = 7,
     .doc = "verbs transport retries after an ACK timeout before a write fails and its peer is "
            "reported lost",
     .field = field<&Config::ib_retry_cnt>()},
    {.name = "EAGERCOMM_IB_SL",
     .kind = Kind::kInt,
     .default_text = "auto",
     .max = 15,
     .doc = "InfiniBand service level of the verbs queue pairs (with RoCE: the priority the "
            "NIC maps it to); auto: the path record's on the cm path, 0 on the store path",
     .field = field<&Config::ib_sl>(),
     .allows_auto = true},
    {.name = "EAGERCOMM_IB_TC",
     .kind = Kind::kInt,
     .default_text = "auto",
     .max = 255,
     .doc = "traffic class of the verbs queue pairs' GRH (RoCE: DSCP << 2 | ECN; set it to the "
            "lossless class on a PFC fabric); auto: rdma_cm's on the cm path, 0 on the store "
            "path",
     .field = field<&Config::ib_tc>(),
     .allows_auto = true},
    {.name = "EAGERCOMM_IB_MTU",
     .kind = Kind::kEnum,
     .default_text = "auto",
     .choices = kIbMtuNames,
     .doc = "largest path MTU of the verbs queue pairs, in bytes; auto: the smaller of the two "
            "ports' active MTUs on the store path, the path record's on the cm path. Set it when "
            "a link between the ports has a smaller MTU than they do (the store path cannot ask "
            "the subnet manager for the path)",
     .field = field<&Config::ib_mtu>()},
    {.name = "EAGERCOMM_VERBS_EMULATE",
     .kind = Kind::kBool,
     .default_text = "0",
     .doc = "run the verbs transport on eagercomm's emulated RDMA device (ranks as threads or "
            "as processes of one host, shared memory as the wire) instead of the host's "
            "rdma-core: a test and development aid with a NIC's semantics, not a fast path",
     .field = field<&Config::verbs_emulate>()},
    {.name = "EAGERCOMM_CUDA",
     .kind = Kind::kBool,
     .default_text = "1",
     .doc = "ask the CUDA driver (loaded at run time, when present) whether a buffer is device "
            "memory, without creating a CUDA context; off: no driver is loaded and every buffer "
            "is taken as host memory (a device pointer then faults in the host path)",
     .field = field<&Config::cuda>()},
    {.name = "EAGERCOMM_CUDA_DRIVER",
     .kind = Kind::kString,
     .default_text = "libcuda.so.1",
     .note = "a library name or path for dlopen",
     .doc = "the CUDA driver library that EAGERCOMM_CUDA loads",
     .field = field<&Config::cuda_driver>()},
    // Where a process stands in its job. eagercomm-run sets these; under mpirun, srun or
    // torchrun their own variables are read instead (these override them when set).
    {.name = "EAGERCOMM_RANK",
     .kind = Kind::kInt,
     .default_text = "0",
     .max = 1 << 24,
     .doc = "this process's rank in its job (set by eagercomm-run; otherwise read from "
            "OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID or RANK)",
     .field = field<&Config::rank>()},
    {.name = "EAGERCOMM_SIZE",
     .kind = Kind::kInt,
     .default_text = "1",
     .min = 1,
     .max = 1 << 24,
     .doc = "number of ranks in the job (set by eagercomm-run; otherwise from the launcher's "
            "variables)",
     .field = field<&Config::size>()},
    {.name = "EAGERCOMM_LOCAL_RANK",
     .kind = Kind::kInt,
     .default_text = "0",
     .max = 1 << 24,
     .doc = "this process's rank among the ranks of its host",
     .field = field<&Config::local_rank>()},
    {.name = "EAGERCOMM_LOCAL_SIZE",
     .kind = Kind::kInt,
     .default_text = "1",
     .min = 1,
     .max = 1 << 24,
     .doc = "number of ranks on this host",
     .field = field<&Config::local_size>()},
    {.name = "EAGERCOMM_MASTER_ADDR",
     .kind = Kind::kString,
     .default_text = "",
     .note = "host name or address of the bootstrap store (rank 0 serves it)",
     .doc = "where the bootstrap store listens; needed under mpirun without eagercomm-run (srun: "
            "the first host of the job; torchrun: MASTER_ADDR)",
     .field = field<&Config::master_addr>()},
    {.name = "EAGERCOMM_MASTER_PORT",
     .kind = Kind::kInt,
     .default_text = "0",
     .max = 65535,
     .doc = "TCP port of the bootstrap store (0: MASTER_PORT + 1 under torchrun, which uses "
            "MASTER_PORT itself; 29400 + job id mod 1000 under srun)",
     .field = field<&Config::master_port>()},
    {.name = "EAGERCOMM_JOB_ID",
     .kind = Kind::kString,
     .default_text = "",
     .note = "text (letters, digits, '-', '_')",
     .doc = "names this job's shared-memory segments and store keys; eagercomm-run makes a "
            "fresh one, launchers' job ids are used otherwise",
     .field = field<&Config::job_id>()},
    {.name = "EAGERCOMM_JOB_TOKEN",
     .kind = Kind::kString,
     .default_text = "",
     .note = "secret text shared by the job's ranks",
     .doc = "peers must present it to the bootstrap store; eagercomm-run makes a random one; "
            "set one yourself under other launchers to keep other jobs out",
     .field = field<&Config::job_token>(),
     .secret = true},
};

const Variable* find_variable(std::string_view name) {
  for (const Variable& var : kVariables) {
    if (var.name == name) return &var;
  }
  return nullptr;
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
Status assign(const Variable& var, std::string_view text, Config& config) {
  Result<Parsed> parsed = parse_value(var, text);
  if (!parsed.ok()) {
    return Status(StatusCode::kInvalidArgument, bad_value_message(var, text, parsed.status()));
  }
  var.field.store(var, *parsed, config);
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

Result<Config> Config::load(const std::map<std::string, std::string>& env) {
  Config config;
  std::string errors;
  // Table order, so that errors read in the same order as eagercomm-info's rows.
  for (const Variable& var : kVariables) {
    const auto it = env.find(std::string(var.name));
    if (it == env.end()) continue;
    Status status = assign(var, it->second, config);
    if (!status.ok()) {
      if (!errors.empty()) errors += "; ";
      errors += status.message();
      continue;
    }
    config.sources_[std::string(var.name)] = ConfigSource::kEnvironment;
  }
  for (const auto& [name, value] : env) {
    if (name.starts_with(kPrefix) && find_variable(name) == nullptr) {
      config.unknown_names.push_back(name);
    }
  }
  if (!errors.empty()) return Status(StatusCode::kInvalidArgument, std::move(errors));
  return config;
}

Result<Config> Config::from_environ() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (!text.starts_with(kPrefix)) continue;
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return load(env);
}

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
  const Variable* var = find_variable(name);
  if (var == nullptr) {
    std::string message = "unknown variable " + std::string(name);
    if (const std::string hint = suggest_name(name); !hint.empty()) {
      message += " (did you mean " + hint + "?)";
    }
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  EC_RETURN_IF_ERROR(assign(*var, value, *this));
  sources_[std::string(var->name)] = ConfigSource::kOverride;
  return Status::Ok();
}

std::vector<Config::Row> Config::describe() const {
  std::vector<Row> rows;
  rows.reserve(std::size(kVariables));
  for (const Variable& var : kVariables) {
    std::string value = var.field.format(var, *this);
    if (var.secret && !value.empty()) value = "(set, not shown)";
    rows.push_back(Row{std::string(var.name), std::move(value), source_name(source_of(var.name)),
                       accepted_text(var), std::string(var.doc), std::string(var.default_text)});
  }
  return rows;
}

ConfigSource Config::source_of(std::string_view name) const {
  const auto it = sources_.find(name);
  return it == sources_.end() ? ConfigSource::kDefault : it->second;
}

std::string Config::suggest_name(std::string_view unknown_name) {
  constexpr size_t kMaxDistance = 2;
  const Variable* best = nullptr;
  size_t best_distance = kMaxDistance + 1;
  for (const Variable& var : kVariables) {
    const size_t d = edit_distance(unknown_name, var.name);
    if (d < best_distance) {
      best = &var;
      best_distance = d;
    }
  }
  return best != nullptr ? std::string(best->name) : std::string();
}

}  // namespace eagercomm
