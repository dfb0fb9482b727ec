// Launcher discovery: one function per launcher, each filling a LaunchInfo from its variables,
// then the EAGERCOMM_* overrides and one validation for all of them.
#include "runtime/launch_env.h"

#include <time.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/hash.h"
#include "runtime/log.h"

extern char** environ;  // POSIX: the process environment, declared by no standard header.

namespace eagercomm {
namespace {

using Env = std::map<std::string, std::string>;

constexpr int kMaxRanks = 1 << 24;  // the config table's bound for EAGERCOMM_SIZE
constexpr uint32_t kDefaultStorePort = 29400;
constexpr size_t kMaxJobIdChars = 128;  // shm segment names must stay under NAME_MAX

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool job_id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// A launcher's job id made usable in names: other characters become '_', and an overlong id
// keeps its start plus a hash of the whole (so two long ids stay distinct).
std::string sanitize_job_id(std::string_view raw) {
  std::string out(raw);
  for (char& c : out) {
    if (!job_id_char(c)) c = '_';
  }
  if (out.size() > kMaxJobIdChars)
    out = out.substr(0, kMaxJobIdChars - 17) + "-" + hex64(job_id_hash(raw));
  return out;
}

// Everything a launcher reader needs: the variables, the config, and how to word errors.
class Reader {
 public:
  Reader(const Env& env, const RuntimeConfig& config, const char* launched_by)
      : env_(env), config_(config), launched_by_(launched_by) {}

  // The value of `name`, or nullptr when it is unset or empty.
  const std::string* find(const char* name) const {
    const auto it = env_.find(name);
    return it == env_.end() || it->second.empty() ? nullptr : &it->second;
  }
  bool has(const char* name) const { return find(name) != nullptr; }

  bool overridden(std::string_view eager_name) const {
    return config_.source_of(eager_name) != ConfigSource::kDefault;
  }

  Status error(const std::string& what) const {
    return Status(StatusCode::kInvalidArgument, std::string(launched_by_) + ": " + what);
  }

  // A whole number in [min, kMaxRanks] read from `name`; nullopt when unset.
  Result<std::optional<int>> optional_int(const char* name, int min) const {
    const std::string* text = find(name);
    if (text == nullptr) return std::optional<int>();
    int value = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || end != text->data() + text->size() || value < min ||
        value > kMaxRanks) {
      return error(std::string(name) + "='" + *text + "' is not a whole number in " +
                   std::to_string(min) + ".." + std::to_string(kMaxRanks));
    }
    return std::optional<int>(value);
  }

  Result<int> required_int(const char* name, int min, const std::string& fix) const {
    EC_ASSIGN_OR_RETURN(std::optional<int> v, optional_int(name, min));
    if (!v) return error(std::string(name) + " is not set" + (fix.empty() ? "" : "; " + fix));
    return *v;
  }

  const RuntimeConfig& config() const { return config_; }

 private:
  const Env& env_;
  const RuntimeConfig& config_;
  const char* launched_by_;
};

// What the draft's numbers came from, for validation errors ("OMPI_COMM_WORLD_RANK=4").
struct Draft {
  LaunchInfo info;
  std::string rank_from = "rank", size_from = "size";
  std::string local_rank_from = "local rank", local_size_from = "local size";
};

// The job's EAGERCOMM_SIZE / _LOCAL_RANK / _LOCAL_SIZE when set, else the launcher's value.
// `name` is the field; `from` gets the variable the value came from.
template <class Fn>
Status pick(const Reader& r, std::string_view eager_name, uint32_t eager_value, int& field,
            std::string& from, Fn launcher_value) {
  if (r.overridden(eager_name)) {
    field = static_cast<int>(eager_value);
    from = std::string(eager_name) + "=" + std::to_string(eager_value);
    return Status::Ok();
  }
  return launcher_value();
}

// Sets `field` and `from` from the launcher variable `var` (required).
Status from_var(const Reader& r, const char* var, int min, const std::string& fix, int& field,
                std::string& from) {
  EC_ASSIGN_OR_RETURN(field, r.required_int(var, min, fix));
  from = std::string(var) + "=" + std::to_string(field);
  return Status::Ok();
}

// The local rank and size from Slurm's variables (overrides applied by the caller's pick()).
Status slurm_local(const Reader& r, Draft& d) {
  EC_RETURN_IF_ERROR(pick(r, "EAGERCOMM_LOCAL_RANK", r.config().local_rank, d.info.local_rank,
                          d.local_rank_from, [&] {
                            return from_var(r, "SLURM_LOCALID", 0, "set EAGERCOMM_LOCAL_RANK",
                                            d.info.local_rank, d.local_rank_from);
                          }));
  return pick(r, "EAGERCOMM_LOCAL_SIZE", r.config().local_size, d.info.local_size,
              d.local_size_from, [&]() -> Status {
                const char* var = r.has("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                  : r.has("SLURM_TASKS_PER_NODE")    ? "SLURM_TASKS_PER_NODE"
                                                                     : nullptr;
                if (var == nullptr) {
                  return r.error(
                      "neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set, so the "
                      "number of ranks on this node is unknown; set EAGERCOMM_LOCAL_SIZE");
                }
                EC_ASSIGN_OR_RETURN(std::optional<int> node, r.optional_int("SLURM_NODEID", 0));
                Result<int> tasks = slurm_tasks_on_node(*r.find(var), node.value_or(0));
                if (!tasks.ok()) {
                  return r.error(std::string(var) + ": " + tasks.status().message() +
                                 (node ? " (SLURM_NODEID=" + std::to_string(*node) + ")" : "") +
                                 "; set EAGERCOMM_LOCAL_SIZE");
                }
                d.info.local_size = *tasks;
                d.local_size_from = std::string(var) + "='" + *r.find(var) + "'";
                return Status::Ok();
              });
}

std::string unique_local_job_id() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
  return "local-" + std::to_string(::getpid()) + "-" + hex64(ns).substr(4);
}

std::string address_job_id(const std::string& host, uint32_t port) {
  return "job-" + hex64(job_id_hash(host + ":" + std::to_string(port)));
}

// ---- 1. eagercomm-run or explicit EAGERCOMM_* variables ----
Status from_eagercomm(const Reader& r, Draft& d) {
  const RuntimeConfig& c = r.config();
  d.info.launcher = "eagercomm-run";
  d.info.rank = static_cast<int>(c.rank);
  d.rank_from = "EAGERCOMM_RANK=" + std::to_string(c.rank);
  if (!r.overridden("EAGERCOMM_SIZE")) {
    return r.error(
        "EAGERCOMM_SIZE is not set; set it too (eagercomm-run sets every EAGERCOMM_ job "
        "variable), or unset EAGERCOMM_RANK to use the launcher's own variables");
  }
  d.info.size = static_cast<int>(c.size);
  d.size_from = "EAGERCOMM_SIZE=" + std::to_string(c.size);
  d.info.local_rank = static_cast<int>(c.local_rank);
  d.local_rank_from = "EAGERCOMM_LOCAL_RANK=" + std::to_string(c.local_rank);
  d.info.local_size = static_cast<int>(c.local_size);
  d.local_size_from = "EAGERCOMM_LOCAL_SIZE=" + std::to_string(c.local_size);
  if (c.master_port == 0) {
    if (d.info.size > 1) {
      return r.error("EAGERCOMM_MASTER_PORT is not set (or 0) for a job of " +
                     std::to_string(d.info.size) +
                     " ranks; set it to the port of the job's store (eagercomm-run does), or "
                     "start the ranks with eagercomm-run");
    }
    // One rank and no store to join: it serves its own, on a free port.
    d.info.serve_store = true;
    d.info.store_host = c.master_addr.empty() ? "127.0.0.1" : c.master_addr;
    d.info.store_port = 0;
    d.info.job_id = unique_local_job_id();
    return Status::Ok();
  }
  if (c.master_addr.empty() && d.info.size > 1) {
    return r.error(
        "EAGERCOMM_MASTER_ADDR is not set; set it to the host of the job's store (eagercomm-run "
        "does), or start the ranks with eagercomm-run");
  }
  d.info.store_host = c.master_addr.empty() ? "127.0.0.1" : c.master_addr;
  d.info.store_port = static_cast<uint16_t>(c.master_port);
  d.info.serve_store = false;  // the launcher hosts it
  d.info.job_id = address_job_id(d.info.store_host, d.info.store_port);
  return Status::Ok();
}

// ---- 2. Open MPI (mpirun) or another PMIx launcher ----
Status from_open_mpi(const Reader& r, Draft& d) {
  const RuntimeConfig& c = r.config();
  d.info.launcher = "open-mpi";
  const bool ompi = r.has("OMPI_COMM_WORLD_RANK");
  const std::string fix_mpirun = "mpirun sets it; set the matching EAGERCOMM_ variable";
  if (ompi) {
    EC_RETURN_IF_ERROR(
        from_var(r, "OMPI_COMM_WORLD_RANK", 0, fix_mpirun, d.info.rank, d.rank_from));
  } else {
    EC_RETURN_IF_ERROR(from_var(r, "PMIX_RANK", 0, fix_mpirun, d.info.rank, d.rank_from));
  }
  EC_RETURN_IF_ERROR(pick(r, "EAGERCOMM_SIZE", c.size, d.info.size, d.size_from, [&]() -> Status {
    if (ompi || r.has("OMPI_COMM_WORLD_SIZE")) {
      return from_var(r, "OMPI_COMM_WORLD_SIZE", 1, fix_mpirun, d.info.size, d.size_from);
    }
    if (r.has("SLURM_NTASKS")) return from_var(r, "SLURM_NTASKS", 1, "", d.info.size, d.size_from);
    return r.error(
        "PMIX_RANK is set but not the job size (OMPI_COMM_WORLD_SIZE or SLURM_NTASKS); set "
        "EAGERCOMM_SIZE");
  }));
  if (ompi) {
    EC_RETURN_IF_ERROR(
        pick(r, "EAGERCOMM_LOCAL_RANK", c.local_rank, d.info.local_rank, d.local_rank_from, [&] {
          return from_var(r, "OMPI_COMM_WORLD_LOCAL_RANK", 0, "set EAGERCOMM_LOCAL_RANK",
                          d.info.local_rank, d.local_rank_from);
        }));
    EC_RETURN_IF_ERROR(
        pick(r, "EAGERCOMM_LOCAL_SIZE", c.local_size, d.info.local_size, d.local_size_from, [&] {
          return from_var(r, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, "set EAGERCOMM_LOCAL_SIZE",
                          d.info.local_size, d.local_size_from);
        }));
  } else if (r.has("SLURM_LOCALID")) {
    EC_RETURN_IF_ERROR(slurm_local(r, d));
  } else {
    d.info.local_rank = r.overridden("EAGERCOMM_LOCAL_RANK") ? static_cast<int>(c.local_rank) : 0;
    d.info.local_size = r.overridden("EAGERCOMM_LOCAL_SIZE") ? static_cast<int>(c.local_size) : 1;
  }
  if (c.master_addr.empty()) {
    return r.error(
        "set EAGERCOMM_MASTER_ADDR to rank 0's host, or start with eagercomm-run, or use "
        "Communicator::from_mpi()");
  }
  d.info.store_host = c.master_addr;
  d.info.store_port = static_cast<uint16_t>(c.master_port != 0 ? c.master_port : kDefaultStorePort);
  if (const std::string* job = r.find("OMPI_MCA_ess_base_jobid")) {
    d.info.job_id = sanitize_job_id("ompi-" + *job);
  } else {
    d.info.job_id = address_job_id(d.info.store_host, d.info.store_port);
  }
  d.info.serve_store = d.info.rank == 0;
  return Status::Ok();
}

// ---- 3. Slurm (srun) ----
Status from_slurm(const Reader& r, Draft& d) {
  const RuntimeConfig& c = r.config();
  d.info.launcher = "slurm";
  EC_RETURN_IF_ERROR(from_var(r, "SLURM_PROCID", 0, "", d.info.rank, d.rank_from));
  EC_RETURN_IF_ERROR(pick(r, "EAGERCOMM_SIZE", c.size, d.info.size, d.size_from, [&] {
    const char* var =
        r.has("SLURM_NTASKS") || !r.has("SLURM_NPROCS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
    return from_var(r, var, 1, "start the job with srun -n, or set EAGERCOMM_SIZE", d.info.size,
                    d.size_from);
  }));
  EC_RETURN_IF_ERROR(slurm_local(r, d));
  if (!c.master_addr.empty()) {
    d.info.store_host = c.master_addr;
  } else {
    const char* var = r.has("SLURM_STEP_NODELIST")  ? "SLURM_STEP_NODELIST"
                      : r.has("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                    : nullptr;
    if (var == nullptr) {
      return r.error(
          "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set, so rank 0's host is "
          "unknown; set EAGERCOMM_MASTER_ADDR");
    }
    d.info.store_host = slurm_first_host(*r.find(var));
    if (d.info.store_host.empty()) {
      return r.error(std::string(var) + "='" + *r.find(var) +
                     "' names no host; set EAGERCOMM_MASTER_ADDR");
    }
  }
  const bool need_job = c.master_port == 0 || c.job_id.empty();
  uint64_t job = 0;
  const char* job_var =
      r.has("SLURM_JOB_ID") || !r.has("SLURM_JOBID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
  if (need_job) {
    const std::string* text = r.find(job_var);
    if (text == nullptr) {
      return r.error(std::string(job_var) +
                     " is not set; set EAGERCOMM_MASTER_PORT and EAGERCOMM_JOB_ID");
    }
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), job);
    if (ec != std::errc() || end != text->data() + text->size()) {
      return r.error(std::string(job_var) + "='" + *text +
                     "' is not a number; set EAGERCOMM_MASTER_PORT and EAGERCOMM_JOB_ID");
    }
  }
  d.info.store_port =
      static_cast<uint16_t>(c.master_port != 0 ? c.master_port : kDefaultStorePort + job % 1000);
  std::string id = "slurm-" + std::to_string(job);
  const std::string* step = r.find("SLURM_STEP_ID");
  if (step == nullptr) step = r.find("SLURM_STEPID");
  if (step != nullptr) id += "-" + *step;
  d.info.job_id = sanitize_job_id(id);
  d.info.serve_store = d.info.rank == 0;
  return Status::Ok();
}

// ---- 4. torchrun (or torch's variables set by hand) ----
Status from_torchrun(const Reader& r, Draft& d) {
  const RuntimeConfig& c = r.config();
  d.info.launcher = "torchrun";
  const std::string fix = "torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together";
  EC_RETURN_IF_ERROR(from_var(r, "RANK", 0, fix, d.info.rank, d.rank_from));
  EC_RETURN_IF_ERROR(pick(r, "EAGERCOMM_SIZE", c.size, d.info.size, d.size_from, [&] {
    return from_var(r, "WORLD_SIZE", 1, fix, d.info.size, d.size_from);
  }));
  EC_RETURN_IF_ERROR(pick(r, "EAGERCOMM_LOCAL_RANK", c.local_rank, d.info.local_rank,
                          d.local_rank_from, [&]() -> Status {
                            EC_ASSIGN_OR_RETURN(std::optional<int> v,
                                                r.optional_int("LOCAL_RANK", 0));
                            d.info.local_rank = v.value_or(0);
                            if (v) d.local_rank_from = "LOCAL_RANK=" + std::to_string(*v);
                            return Status::Ok();
                          }));
  EC_RETURN_IF_ERROR(pick(r, "EAGERCOMM_LOCAL_SIZE", c.local_size, d.info.local_size,
                          d.local_size_from, [&]() -> Status {
                            EC_ASSIGN_OR_RETURN(std::optional<int> v,
                                                r.optional_int("LOCAL_WORLD_SIZE", 1));
                            d.info.local_size = v.value_or(1);
                            if (v) d.local_size_from = "LOCAL_WORLD_SIZE=" + std::to_string(*v);
                            return Status::Ok();
                          }));
  const std::string* addr = r.find("MASTER_ADDR");
  if (!c.master_addr.empty()) {
    d.info.store_host = c.master_addr;
  } else if (addr != nullptr) {
    d.info.store_host = *addr;
  } else {
    return r.error("MASTER_ADDR is not set; " + fix + " (or set EAGERCOMM_MASTER_ADDR)");
  }
  const std::string* port_text = r.find("MASTER_PORT");
  int torch_port = 0;
  if (port_text != nullptr) {
    const auto [end, ec] =
        std::from_chars(port_text->data(), port_text->data() + port_text->size(), torch_port);
    if (ec != std::errc() || end != port_text->data() + port_text->size() || torch_port < 1 ||
        torch_port > 65535) {
      return r.error("MASTER_PORT='" + *port_text + "' is not a port (1..65535)");
    }
  }
  if (c.master_port != 0) {
    d.info.store_port = static_cast<uint16_t>(c.master_port);
  } else if (port_text == nullptr) {
    return r.error("MASTER_PORT is not set; " + fix + " (or set EAGERCOMM_MASTER_PORT)");
  } else if (torch_port == 65535) {
    return r.error(
        "MASTER_PORT=65535 leaves no port above it for eagercomm's store (torchrun's own store "
        "uses MASTER_PORT); set EAGERCOMM_MASTER_PORT");
  } else {
    d.info.store_port = static_cast<uint16_t>(torch_port + 1);
  }
  const std::string* run_id = r.find("TORCHELASTIC_RUN_ID");
  if (run_id != nullptr && *run_id != "none") {
    d.info.job_id = sanitize_job_id("torchrun-" + *run_id);
  } else {
    d.info.job_id = sanitize_job_id("torchrun-" + (addr ? *addr : d.info.store_host) + "-" +
                                    (port_text ? *port_text : std::to_string(d.info.store_port)));
  }
  d.info.serve_store = d.info.rank == 0;
  return Status::Ok();
}

// ---- 5. no launcher: one process ----
Status from_nothing(const Reader& r, Draft& d) {
  const RuntimeConfig& c = r.config();
  d.info.launcher = "environment";
  if (r.overridden("EAGERCOMM_SIZE") && c.size > 1) {
    return r.error("EAGERCOMM_SIZE=" + std::to_string(c.size) +
                   " but no rank: set EAGERCOMM_RANK, or start the ranks with eagercomm-run, "
                   "mpirun, srun or torchrun");
  }
  d.info.rank = 0;
  d.info.size = 1;
  d.info.local_rank = static_cast<int>(c.local_rank);
  d.info.local_size = static_cast<int>(c.local_size);
  d.local_rank_from = "EAGERCOMM_LOCAL_RANK=" + std::to_string(c.local_rank);
  d.info.store_host = c.master_addr.empty() ? "127.0.0.1" : c.master_addr;
  d.info.store_port = static_cast<uint16_t>(c.master_port);
  d.info.serve_store = true;
  d.info.job_id = unique_local_job_id();
  return Status::Ok();
}

const char* launched_by(const Reader& r, const RuntimeConfig& config) {
  if (config.source_of("EAGERCOMM_RANK") != ConfigSource::kDefault) return "EAGERCOMM_RANK is set";
  if (r.has("OMPI_COMM_WORLD_RANK")) return "launched by mpirun";
  if (r.has("PMIX_RANK")) return "launched by a PMIx launcher";
  if (r.has("SLURM_PROCID")) return "launched by srun";
  if (r.has("RANK") || r.has("WORLD_SIZE")) return "launched by torchrun";
  return "no launcher found";
}

Status validate(const Reader& r, Draft& d) {
  LaunchInfo& i = d.info;
  if (i.size < 1) return r.error("the job size must be at least 1 (" + d.size_from + ")");
  if (i.rank < 0 || i.rank >= i.size) {
    return r.error("rank " + std::to_string(i.rank) + " is not below the job size " +
                   std::to_string(i.size) + " (" + d.rank_from + ", " + d.size_from + ")");
  }
  if (i.local_size < 1) {
    return r.error("the local size must be at least 1 (" + d.local_size_from + ")");
  }
  if (i.local_rank < 0 || i.local_rank >= i.local_size) {
    return r.error("local rank " + std::to_string(i.local_rank) + " is not below the local size " +
                   std::to_string(i.local_size) + " (" + d.local_rank_from + ", " +
                   d.local_size_from + ")");
  }
  if (i.local_size > i.size) {
    return r.error("the local size " + std::to_string(i.local_size) + " is larger than the job (" +
                   d.local_size_from + ", " + d.size_from + ")");
  }
  if (i.store_host.empty()) return r.error("no store host; set EAGERCOMM_MASTER_ADDR");
  if (i.store_port == 0 && !(i.serve_store && i.size == 1)) {
    return r.error("store port 0 only works for a single process; set EAGERCOMM_MASTER_PORT");
  }
  // A job id the user gave must already be clean; launchers' ids were sanitized.
  const std::string& user_id = r.config().job_id;
  if (!user_id.empty()) {
    for (char ch : user_id) {
      if (!job_id_char(ch)) {
        return r.error("EAGERCOMM_JOB_ID='" + user_id +
                       "' may only contain letters, digits, '-' and '_'");
      }
    }
    if (user_id.size() > kMaxJobIdChars) {
      return r.error("EAGERCOMM_JOB_ID is " + std::to_string(user_id.size()) +
                     " characters long; at most " + std::to_string(kMaxJobIdChars));
    }
    i.job_id = user_id;
  }
  i.token = r.config().job_token;
  return Status::Ok();
}

}  // namespace

Result<int> slurm_tasks_on_node(std::string_view list, int node) {
  const auto bad = [&] {
    return Status(StatusCode::kInvalidArgument,
                  "'" + std::string(list) + "' is not a tasks-per-node list (like 2(x3),1)");
  };
  // The whole list is checked before picking the entry: a malformed list is an error on every
  // node, not only on the nodes past the first bad entry.
  std::vector<std::pair<int, int64_t>> entries;  // (tasks, nodes)
  int64_t nodes = 0;
  for (size_t pos = 0; pos <= list.size();) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    std::string_view entry = list.substr(pos, comma - pos);
    pos = comma + 1;
    int count = 0;
    const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), count);
    if (ec != std::errc() || count < 1 || count > kMaxRanks) return bad();
    std::string_view rest(end, static_cast<size_t>(entry.data() + entry.size() - end));
    int64_t repeat = 1;
    if (!rest.empty()) {
      if (!rest.starts_with("(x") || !rest.ends_with(")")) return bad();
      rest = rest.substr(2, rest.size() - 3);
      const auto [e2, ec2] = std::from_chars(rest.data(), rest.data() + rest.size(), repeat);
      if (ec2 != std::errc() || e2 != rest.data() + rest.size() || repeat < 1 ||
          repeat > kMaxRanks) {
        return bad();
      }
    }
    entries.emplace_back(count, repeat);
    nodes += repeat;
  }
  if (node < 0) return bad();
  int64_t remaining = node;
  for (const auto& [count, repeat] : entries) {
    if (remaining < repeat) return count;
    remaining -= repeat;
  }
  return Status(StatusCode::kInvalidArgument, "'" + std::string(list) + "' has no node " +
                                                  std::to_string(node) + " (it lists " +
                                                  std::to_string(nodes) + ")");
}

std::string slurm_first_host(std::string_view nodelist) {
  std::string out;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] == ' ') ++i;
  while (i < nodelist.size()) {
    const char c = nodelist[i];
    if (c == ',' || c == ' ') break;  // the end of the first host
    if (c != '[') {
      out += c;
      ++i;
      continue;
    }
    const size_t close = nodelist.find(']', i);
    if (close == std::string_view::npos) break;  // malformed: keep what came before
    // The first element of the range list: "01-03,07" -> "01".
    std::string_view inner = nodelist.substr(i + 1, close - i - 1);
    inner = inner.substr(0, inner.find(','));
    inner = inner.substr(0, inner.find('-'));
    out += inner;
    i = close + 1;
  }
  return out;
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

Result<LaunchInfo> discover_launch(const std::map<std::string, std::string>& env,
                                   const RuntimeConfig& config) {
  const Reader probe(env, config, "");
  const Reader r(env, config, launched_by(probe, config));
  Draft d;
  Status s;
  if (config.source_of("EAGERCOMM_RANK") != ConfigSource::kDefault) {
    s = from_eagercomm(r, d);
  } else if (r.has("OMPI_COMM_WORLD_RANK") || r.has("PMIX_RANK")) {
    s = from_open_mpi(r, d);
  } else if (r.has("SLURM_PROCID")) {
    s = from_slurm(r, d);
  } else if (r.has("RANK") || r.has("WORLD_SIZE")) {
    s = from_torchrun(r, d);
  } else {
    s = from_nothing(r, d);
  }
  if (s.ok()) s = validate(r, d);
  if (!s.ok()) {
    EC_ERROR(kBoot, "%s", s.message().c_str());
    return s;
  }
  const LaunchInfo& i = d.info;
  EC_INFO(kBoot, "launch: %s, rank %d of %d (local %d of %d), store %s:%u %s, job %s%s",
          i.launcher.c_str(), i.rank, i.size, i.local_rank, i.local_size, i.store_host.c_str(),
          static_cast<unsigned>(i.store_port), i.serve_store ? "served here" : "joined",
          i.job_id.c_str(), i.token.empty() ? ", no job token" : "");
  return d.info;
}

}  // namespace eagercomm
