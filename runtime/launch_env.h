// Where this process stands in its job: rank, size, local rank and size, where the bootstrap
// store listens and who serves it, read from whichever launcher started the process.
//
// Sources, first match wins (launcher names in LaunchInfo::launcher):
//
// 1. "eagercomm-run": EAGERCOMM_RANK is set (eagercomm-run sets it; so can a user). Needs
//    EAGERCOMM_SIZE, and for more than one rank EAGERCOMM_MASTER_ADDR and EAGERCOMM_MASTER_PORT.
//    These variables describe a store somebody else hosts (eagercomm-run does), so serve_store
//    is false. Exception: EAGERCOMM_MASTER_PORT unset or 0 means "no store to join": allowed
//    only for a job of one rank, which then serves its own store on a free port of
//    EAGERCOMM_MASTER_ADDR (default 127.0.0.1). To start ranks by hand with rank 0 serving the
//    store, set torchrun's variables instead (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: the
//    store then listens on MASTER_PORT + 1). EAGERCOMM_LOCAL_RANK / _LOCAL_SIZE default to 0 / 1
//    (every rank alone on its host). Job id: EAGERCOMM_JOB_ID, else derived from the store's
//    address.
// 2. "open-mpi": OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (mpirun sets all four);
//    or PMIX_RANK alone (another PMIx launcher): the size from OMPI_COMM_WORLD_SIZE or
//    SLURM_NTASKS, the local rank and size from Slurm's variables when present (else 0 / 1).
//    The store host must be EAGERCOMM_MASTER_ADDR (mpirun does not say where rank 0 runs);
//    port EAGERCOMM_MASTER_PORT or 29400; job id "ompi-" + OMPI_MCA_ess_base_jobid, else
//    derived from the store's address; rank 0 serves.
// 3. "slurm": SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS), SLURM_LOCALID; the local size is
//    this node's entry of SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE), written like
//    "2(x3),1": node SLURM_NODEID's count, the first entry when SLURM_NODEID is absent. The store
//    host is the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), port
//    EAGERCOMM_MASTER_PORT or 29400 + SLURM_JOB_ID % 1000, job id "slurm-<jobid>-<stepid>"
//    ("slurm-<jobid>" outside a step); rank 0 serves.
// 4. "torchrun": RANK and WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (default 0 / 1),
//    MASTER_ADDR and MASTER_PORT. torchrun's own store owns MASTER_PORT, so ours listens on
//    EAGERCOMM_MASTER_PORT or MASTER_PORT + 1. Job id from TORCHELASTIC_RUN_ID (unless it is
//    torchrun's placeholder "none"), else "torchrun-<addr>-<port>"; rank 0 serves.
// 5. "environment": no launcher: a single process, rank 0 of 1, serving its own store on
//    127.0.0.1 port 0 (a free port). Job id "local-<pid>-<time>".
//
// In modes 2-5 an EAGERCOMM_* row whose source is not the default (EAGERCOMM_SIZE,
// _LOCAL_RANK, _LOCAL_SIZE, _MASTER_ADDR, _MASTER_PORT, _JOB_ID) wins over the launcher's
// variable. Launcher job ids are sanitized into [A-Za-z0-9_-] (other characters become '_');
// an EAGERCOMM_JOB_ID with other characters is an error.
//
// Token: EAGERCOMM_JOB_TOKEN, in every mode. eagercomm-run makes a random one. Under other
// launchers it is empty unless the user sets it, and then any process that can reach the
// store's port can read and overwrite the job's bootstrap keys (and so disturb or join the
// job): set one (the same for every rank) on shared networks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "runtime/config.h"
#include "runtime/status.h"

namespace eagercomm {

struct LaunchInfo {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  std::string store_host;    // where the bootstrap store listens / will listen
  uint16_t store_port = 0;   // 0 only with serve_store and size 1: a free port
  bool serve_store = false;  // this process must start the TcpStoreServer
  std::string job_id;        // names shm segments and store scopes: [A-Za-z0-9_-] only
  std::string token;
  std::string launcher;  // "eagercomm-run", "open-mpi", "slurm", "torchrun", "environment"
};

// Reads the launcher's variables from `env` (name -> value; real use passes
// process_environment()) and the EAGERCOMM_* rows of `config` (see above for what wins). The
// error (kInvalidArgument) names the variable that is missing or bad and how to fix it.
// Thread-safe (pure, apart from the pid and clock read for a single process's job id).
Result<LaunchInfo> discover_launch(const std::map<std::string, std::string>& env,
                                   const RuntimeConfig& config);

// The process environment as a map. Thread-safe as long as nobody calls setenv() meanwhile.
std::map<std::string, std::string> process_environment();

// The first host of a Slurm host list: "node[01-03,07],gpu5" -> "node01"; "a,b" -> "a";
// "x" -> "x"; "rack[1-2]-n[5-6]" -> "rack1-n5". Best effort on malformed lists (an unclosed
// bracket keeps the text before it); "" for an empty list. Thread-safe (pure).
std::string slurm_first_host(std::string_view nodelist);

// The task count of node `node` in a Slurm tasks-per-node list ("2(x3),1": nodes 0-2 run 2,
// node 3 runs 1). kInvalidArgument when the list is malformed or has no such node.
Result<int> slurm_tasks_on_node(std::string_view tasks_per_node, int node);

}  // namespace eagercomm
