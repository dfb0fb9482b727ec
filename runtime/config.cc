// The runtime's rows of the EAGERCOMM_* table (runtime/config.h).
#include "runtime/config.h"

namespace eagercomm {
namespace {

using namespace config_units;

constexpr std::string_view kLogLevelNames[] = {"error", "warn", "info", "debug", "trace"};
constexpr std::string_view kProgressThreadNames[] = {"auto", "on", "off"};

constexpr ConfigRow kLoggingAndTimingRows[] = {
    {.name = "EAGERCOMM_LOG_LEVEL",
     .kind = ConfigKind::kEnum,
     .default_text = "warn",
     .choices = kLogLevelNames,
     .doc = "most verbose log level printed; info or debug show setup decisions, trace shows "
            "every message (slow)",
     .field = config_field<&RuntimeConfig::log_level>()},
    {.name = "EAGERCOMM_LOG_SUBSYS",
     .kind = ConfigKind::kSubsysList,
     .default_text = "all",
     .doc = "subsystems whose log lines are printed (\"net,coll\", or \"^net\" for all but "
            "net); narrows debug output to the part under study",
     .field = config_field<&RuntimeConfig::log_subsys>()},
    {.name = "EAGERCOMM_LOG_FILE",
     .kind = ConfigKind::kString,
     .default_text = "",
     .note = "path (%h host, %p pid, %% percent; empty: stderr)",
     .doc = "file the log is appended to instead of stderr; put %p in it to give each process "
            "of a job its own file",
     .field = config_field<&RuntimeConfig::log_file>()},
    {.name = "EAGERCOMM_TIMEOUT",
     .kind = ConfigKind::kDuration,
     .default_text = "300s",
     .doc = "how long a blocking call waits for its peers before failing with a timeout (0: "
            "forever); raise it for slow job start-up, lower it to fail fast",
     .field = config_field<&RuntimeConfig::timeout>()},
    {.name = "EAGERCOMM_HEARTBEAT",
     .kind = ConfigKind::kDuration,
     .default_text = "1s",
     .max = 60 * kNsPerSecond,
     .doc = "how often a rank tells its peers it is alive (at most EAGERCOMM_TIMEOUT/4 apart); "
            "a peer silent for EAGERCOMM_TIMEOUT is declared hung and every operation fails "
            "naming it, and timeouts report which ranks had not arrived; 0 turns both off",
     .field = config_field<&RuntimeConfig::heartbeat>()},
    {.name = "EAGERCOMM_SPIN",
     .kind = ConfigKind::kDuration,
     .default_text = "100us",
     .max = kNsPerSecond,
     .doc = "how long an idle wait polls (pausing, then yielding the core) before it sleeps; "
            "about one sleep/wake-up costs here; 0 sleeps at once",
     .field = config_field<&RuntimeConfig::spin>()},
    {.name = "EAGERCOMM_PROGRESS_THREAD",
     .kind = ConfigKind::kEnum,
     .default_text = "auto",
     .choices = kProgressThreadNames,
     .doc = "whether a background thread drives communication while ranks compute; auto "
            "starts it with the first partial allreduce (which needs it), off saves a core",
     .field = config_field<&RuntimeConfig::progress_thread>()},
};

constexpr ConfigRow kDeviceAndJobRows[] = {
    {.name = "EAGERCOMM_CUDA",
     .kind = ConfigKind::kBool,
     .default_text = "1",
     .doc = "ask the CUDA driver (loaded at run time, when present) whether a buffer is device "
            "memory, without creating a CUDA context; off: no driver is loaded and every buffer "
            "is taken as host memory (a device pointer then faults in the host path)",
     .field = config_field<&RuntimeConfig::cuda>()},
    {.name = "EAGERCOMM_CUDA_DRIVER",
     .kind = ConfigKind::kString,
     .default_text = "libcuda.so.1",
     .note = "a library name or path for dlopen",
     .doc = "the CUDA driver library that EAGERCOMM_CUDA loads",
     .field = config_field<&RuntimeConfig::cuda_driver>()},
    // Where a process stands in its job. eagercomm-run sets these; under mpirun, srun or
    // torchrun their own variables are read instead (these override them when set).
    {.name = "EAGERCOMM_RANK",
     .kind = ConfigKind::kInt,
     .default_text = "0",
     .max = 1 << 24,
     .doc = "this process's rank in its job (set by eagercomm-run; otherwise read from "
            "OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID or RANK)",
     .field = config_field<&RuntimeConfig::rank>()},
    {.name = "EAGERCOMM_SIZE",
     .kind = ConfigKind::kInt,
     .default_text = "1",
     .min = 1,
     .max = 1 << 24,
     .doc = "number of ranks in the job (set by eagercomm-run; otherwise from the launcher's "
            "variables)",
     .field = config_field<&RuntimeConfig::size>()},
    {.name = "EAGERCOMM_LOCAL_RANK",
     .kind = ConfigKind::kInt,
     .default_text = "0",
     .max = 1 << 24,
     .doc = "this process's rank among the ranks of its host",
     .field = config_field<&RuntimeConfig::local_rank>()},
    {.name = "EAGERCOMM_LOCAL_SIZE",
     .kind = ConfigKind::kInt,
     .default_text = "1",
     .min = 1,
     .max = 1 << 24,
     .doc = "number of ranks on this host",
     .field = config_field<&RuntimeConfig::local_size>()},
    {.name = "EAGERCOMM_MASTER_ADDR",
     .kind = ConfigKind::kString,
     .default_text = "",
     .note = "host name or address of the bootstrap store (rank 0 serves it)",
     .doc = "where the bootstrap store listens; needed under mpirun without eagercomm-run (srun: "
            "the first host of the job; torchrun: MASTER_ADDR)",
     .field = config_field<&RuntimeConfig::master_addr>()},
    {.name = "EAGERCOMM_MASTER_PORT",
     .kind = ConfigKind::kInt,
     .default_text = "0",
     .max = 65535,
     .doc = "TCP port of the bootstrap store (0: MASTER_PORT + 1 under torchrun, which uses "
            "MASTER_PORT itself; 29400 + job id mod 1000 under srun)",
     .field = config_field<&RuntimeConfig::master_port>()},
    {.name = "EAGERCOMM_JOB_ID",
     .kind = ConfigKind::kString,
     .default_text = "",
     .note = "text (letters, digits, '-', '_')",
     .doc = "names this job's shared-memory segments and store keys; eagercomm-run makes a "
            "fresh one, launchers' job ids are used otherwise",
     .field = config_field<&RuntimeConfig::job_id>()},
    {.name = "EAGERCOMM_JOB_TOKEN",
     .kind = ConfigKind::kString,
     .default_text = "",
     .note = "secret text shared by the job's ranks",
     .doc = "peers must present it to the bootstrap store; eagercomm-run makes a random one; "
            "set one yourself under other launchers to keep other jobs out",
     .field = config_field<&RuntimeConfig::job_token>(),
     .secret = true},
};

}  // namespace

std::span<const ConfigRow> runtime_logging_and_timing_rows() { return kLoggingAndTimingRows; }

std::span<const ConfigRow> runtime_device_and_job_rows() { return kDeviceAndJobRows; }

}  // namespace eagercomm
