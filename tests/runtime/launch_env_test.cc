// Launcher discovery: every launcher's variable set, which source wins, and errors that name
// the missing or bad variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

#include "collectives/config.h"
#include "runtime/launch_env.h"

namespace eagercomm {
namespace {

using Env = std::map<std::string, std::string>;

// Builds the config from the EAGERCOMM_* entries of `env`, as a process would.
Result<LaunchInfo> discover(const Env& env) {
  Result<Config> config = Config::load(env);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  if (!config.ok()) return config.status();
  return discover_launch(env, config.value());
}

// The error message of a discovery that must fail (kInvalidArgument).
std::string error_of(const Env& env) {
  Result<LaunchInfo> info = discover(env);
  EXPECT_FALSE(info.ok()) << "accepted; launcher " << (info.ok() ? info->launcher : "");
  if (info.ok()) return "";
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  return info.status().message();
}

// Job id shapes, checked by hand: <regex> trips GCC 12's -Wmaybe-uninitialized in the
// sanitizer builds.
bool all_chars(std::string_view s, std::string_view allowed) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!(allowed == "id" ? alnum || c == '-' || c == '_' : allowed.find(c) != allowed.npos)) {
      return false;
    }
  }
  return true;
}
constexpr std::string_view kHex = "0123456789abcdef";
// "job-" + 16 hex digits.
bool is_address_job_id(std::string_view id) {
  return id.size() == 20 && id.starts_with("job-") && all_chars(id.substr(4), kHex);
}
// "local-<pid>-<hex>".
bool is_local_job_id(std::string_view id) {
  if (!id.starts_with("local-")) return false;
  id.remove_prefix(6);
  const size_t dash = id.find('-');
  return dash != id.npos && all_chars(id.substr(0, dash), "0123456789") &&
         all_chars(id.substr(dash + 1), kHex);
}

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "missing '" << (part) << "' in: " << (text)

Env join(Env a, const Env& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

// ---- no launcher ----

TEST(LaunchEnv, NothingMeansOneProcessServingItsOwnStore) {
  auto info = discover({{"HOME", "/root"}, {"PATH", "/bin"}});
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "environment");
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->size, 1);
  EXPECT_EQ(info->local_rank, 0);
  EXPECT_EQ(info->local_size, 1);
  EXPECT_TRUE(info->serve_store);
  EXPECT_EQ(info->store_host, "127.0.0.1");
  EXPECT_EQ(info->store_port, 0);
  EXPECT_TRUE(is_local_job_id(info->job_id)) << info->job_id;
  EXPECT_TRUE(info->token.empty());

  const std::string err = error_of({{"EAGERCOMM_SIZE", "4"}});
  EXPECT_MENTIONS(err, "EAGERCOMM_SIZE=4");
  EXPECT_MENTIONS(err, "EAGERCOMM_RANK");
}

// ---- 1. eagercomm-run / explicit ----

const Env kEagercommRun = {
    {"EAGERCOMM_RANK", "2"},
    {"EAGERCOMM_SIZE", "4"},
    {"EAGERCOMM_LOCAL_RANK", "2"},
    {"EAGERCOMM_LOCAL_SIZE", "4"},
    {"EAGERCOMM_MASTER_ADDR", "127.0.0.1"},
    {"EAGERCOMM_MASTER_PORT", "41234"},
    {"EAGERCOMM_JOB_ID", "run-0123abcd"},
    {"EAGERCOMM_JOB_TOKEN", "f00d"},
};

TEST(LaunchEnv, EagercommRunVariables) {
  auto info = discover(kEagercommRun);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "eagercomm-run");
  EXPECT_EQ(info->rank, 2);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->local_rank, 2);
  EXPECT_EQ(info->local_size, 4);
  EXPECT_EQ(info->store_host, "127.0.0.1");
  EXPECT_EQ(info->store_port, 41234);
  EXPECT_FALSE(info->serve_store) << "the launcher hosts the store";
  EXPECT_EQ(info->job_id, "run-0123abcd");
  EXPECT_EQ(info->token, "f00d");
  // Rank 0 does not serve either: eagercomm-run does.
  auto rank0 = discover(join(kEagercommRun, {{"EAGERCOMM_RANK", "0"}}));
  ASSERT_TRUE(rank0.ok());
  EXPECT_FALSE(rank0->serve_store);
}

TEST(LaunchEnv, ExplicitVariablesMissingOrBad) {
  Env env = kEagercommRun;
  env.erase("EAGERCOMM_SIZE");
  EXPECT_MENTIONS(error_of(env), "EAGERCOMM_SIZE is not set");
  env = kEagercommRun;
  env.erase("EAGERCOMM_MASTER_PORT");
  EXPECT_MENTIONS(error_of(env), "EAGERCOMM_MASTER_PORT is not set");
  env = kEagercommRun;
  env.erase("EAGERCOMM_MASTER_ADDR");
  EXPECT_MENTIONS(error_of(env), "EAGERCOMM_MASTER_ADDR is not set");
  std::string err = error_of(join(kEagercommRun, {{"EAGERCOMM_RANK", "4"}}));
  EXPECT_MENTIONS(err, "EAGERCOMM_RANK=4");
  EXPECT_MENTIONS(err, "EAGERCOMM_SIZE=4");
  err = error_of(join(kEagercommRun, {{"EAGERCOMM_LOCAL_RANK", "4"}}));
  EXPECT_MENTIONS(err, "EAGERCOMM_LOCAL_RANK=4");
  EXPECT_MENTIONS(err, "EAGERCOMM_LOCAL_SIZE=4");
  err =
      error_of(join(kEagercommRun, {{"EAGERCOMM_LOCAL_RANK", "0"}, {"EAGERCOMM_LOCAL_SIZE", "8"}}));
  EXPECT_MENTIONS(err, "EAGERCOMM_LOCAL_SIZE=8");
  err = error_of(join(kEagercommRun, {{"EAGERCOMM_JOB_ID", "my job/1"}}));
  EXPECT_MENTIONS(err, "EAGERCOMM_JOB_ID='my job/1'");
  err = error_of(join(kEagercommRun, {{"EAGERCOMM_JOB_ID", std::string(200, 'j')}}));
  EXPECT_MENTIONS(err, "EAGERCOMM_JOB_ID");
  // Without a port, a single rank serves its own store; more ranks cannot.
  auto single = discover({{"EAGERCOMM_RANK", "0"}, {"EAGERCOMM_SIZE", "1"}});
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  EXPECT_TRUE(single->serve_store);
  EXPECT_EQ(single->store_port, 0);
  EXPECT_EQ(single->store_host, "127.0.0.1");
  EXPECT_EQ(single->launcher, "eagercomm-run");
  // Without an explicit job id one is derived from the store's address (same for every rank).
  env = kEagercommRun;
  env.erase("EAGERCOMM_JOB_ID");
  auto a = discover(env);
  auto b = discover(join(env, {{"EAGERCOMM_RANK", "3"}}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->job_id, b->job_id);
  EXPECT_TRUE(is_address_job_id(a->job_id)) << a->job_id;
}

// ---- 2. Open MPI / PMIx ----

const Env kOpenMpi = {
    {"OMPI_COMM_WORLD_RANK", "5"},
    {"OMPI_COMM_WORLD_SIZE", "8"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
    {"OMPI_MCA_ess_base_jobid", "3245735937"},
    {"EAGERCOMM_MASTER_ADDR", "node7"},
};

TEST(LaunchEnv, OpenMpiVariables) {
  auto info = discover(kOpenMpi);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "open-mpi");
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 4);
  EXPECT_EQ(info->store_host, "node7");
  EXPECT_EQ(info->store_port, 29400);
  EXPECT_FALSE(info->serve_store);
  EXPECT_EQ(info->job_id, "ompi-3245735937");
  auto rank0 = discover(join(kOpenMpi, {{"OMPI_COMM_WORLD_RANK", "0"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                        {"EAGERCOMM_MASTER_PORT", "5000"},
                                        {"OMPI_MCA_ess_base_jobid", "12:7"},
                                        {"EAGERCOMM_JOB_TOKEN", "t"}}));
  ASSERT_TRUE(rank0.ok()) << rank0.status().to_string();
  EXPECT_TRUE(rank0->serve_store);
  EXPECT_EQ(rank0->store_port, 5000);
  EXPECT_EQ(rank0->job_id, "ompi-12_7");
  EXPECT_EQ(rank0->token, "t");
}

TEST(LaunchEnv, OpenMpiErrors) {
  Env env = kOpenMpi;
  env.erase("EAGERCOMM_MASTER_ADDR");
  EXPECT_MENTIONS(error_of(env),
                  "launched by mpirun: set EAGERCOMM_MASTER_ADDR to rank 0's host, or start with "
                  "eagercomm-run, or use Communicator::from_mpi()");
  env = kOpenMpi;
  env.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_MENTIONS(error_of(env), "OMPI_COMM_WORLD_LOCAL_SIZE is not set");
  EXPECT_MENTIONS(error_of(join(kOpenMpi, {{"OMPI_COMM_WORLD_SIZE", "eight"}})),
                  "OMPI_COMM_WORLD_SIZE='eight'");
  EXPECT_MENTIONS(error_of(join(kOpenMpi, {{"OMPI_COMM_WORLD_RANK", "-1"}})),
                  "OMPI_COMM_WORLD_RANK='-1'");
  std::string err = error_of(join(kOpenMpi, {{"OMPI_COMM_WORLD_RANK", "8"}}));
  EXPECT_MENTIONS(err, "OMPI_COMM_WORLD_RANK=8");
  EXPECT_MENTIONS(err, "OMPI_COMM_WORLD_SIZE=8");
  env = join(kOpenMpi, {{"EAGERCOMM_MASTER_PORT", "0"}});  // 0: the launcher's default
  auto info = discover(env);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->store_port, 29400);
}

TEST(LaunchEnv, PmixRankAlone) {
  auto info = discover({{"PMIX_RANK", "3"},
                        {"SLURM_NTASKS", "6"},
                        {"SLURM_LOCALID", "1"},
                        {"SLURM_TASKS_PER_NODE", "2(x3)"},
                        {"EAGERCOMM_MASTER_ADDR", "10.0.0.1"}});
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "open-mpi");
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 6);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);
  EXPECT_TRUE(is_address_job_id(info->job_id)) << info->job_id;
  auto bare =
      discover({{"PMIX_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"EAGERCOMM_MASTER_ADDR", "h"}});
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  EXPECT_EQ(bare->size, 2);
  EXPECT_EQ(bare->local_size, 1);
  EXPECT_TRUE(bare->serve_store);
  const std::string err = error_of({{"PMIX_RANK", "0"}, {"EAGERCOMM_MASTER_ADDR", "h"}});
  EXPECT_MENTIONS(err, "PMIX_RANK");
  EXPECT_MENTIONS(err, "EAGERCOMM_SIZE");
}

// ---- 3. Slurm ----

const Env kSlurm = {
    {"SLURM_PROCID", "5"},
    {"SLURM_NTASKS", "8"},
    {"SLURM_LOCALID", "1"},
    {"SLURM_STEP_TASKS_PER_NODE", "2(x4)"},
    {"SLURM_TASKS_PER_NODE", "9"},
    {"SLURM_NODEID", "2"},
    {"SLURM_STEP_NODELIST", "node[01-04]"},
    {"SLURM_JOB_NODELIST", "other[1-9]"},
    {"SLURM_JOB_ID", "123456"},
    {"SLURM_STEP_ID", "0"},
};

TEST(LaunchEnv, SlurmVariables) {
  auto info = discover(kSlurm);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "slurm");
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);  // the step's count, not the job's
  EXPECT_EQ(info->store_host, "node01");
  EXPECT_EQ(info->store_port, 29400 + 456);
  EXPECT_EQ(info->job_id, "slurm-123456-0");
  EXPECT_FALSE(info->serve_store);
  auto rank0 = discover(join(kSlurm, {{"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(rank0.ok());
  EXPECT_TRUE(rank0->serve_store);

  // Uneven nodes: this node's entry; the job's variables when the step's are absent.
  Env env = join(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "3,2(x2),1"}, {"SLURM_NODEID", "2"}});
  EXPECT_EQ(discover(env)->local_size, 2);
  env["SLURM_NODEID"] = "3";
  env["SLURM_LOCALID"] = "0";
  EXPECT_EQ(discover(env)->local_size, 1);
  env.erase("SLURM_NODEID");
  EXPECT_EQ(discover(env)->local_size, 3);  // no node id: the first entry
  env = kSlurm;
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_STEP_ID");
  env["SLURM_NTASKS"] = "9";
  env["SLURM_PROCID"] = "8";
  env["SLURM_NODEID"] = "0";
  auto batch = discover(env);
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  EXPECT_EQ(batch->local_size, 9);
  EXPECT_EQ(batch->store_host, "other1");
  EXPECT_EQ(batch->job_id, "slurm-123456");
}

TEST(LaunchEnv, SlurmErrors) {
  Env env = kSlurm;
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_JOB_NODELIST");
  std::string err = error_of(env);
  EXPECT_MENTIONS(err, "SLURM_STEP_NODELIST");
  EXPECT_MENTIONS(err, "EAGERCOMM_MASTER_ADDR");
  env = kSlurm;
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env.erase("SLURM_TASKS_PER_NODE");
  err = error_of(env);
  EXPECT_MENTIONS(err, "SLURM_TASKS_PER_NODE");
  EXPECT_MENTIONS(err, "EAGERCOMM_LOCAL_SIZE");
  err = error_of(join(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "2(x"}}));
  EXPECT_MENTIONS(err, "SLURM_STEP_TASKS_PER_NODE");
  err = error_of(join(kSlurm, {{"SLURM_NODEID", "7"}}));
  EXPECT_MENTIONS(err, "SLURM_NODEID=7");
  env = kSlurm;
  env.erase("SLURM_NTASKS");
  EXPECT_MENTIONS(error_of(env), "SLURM_NTASKS is not set");
  env = kSlurm;
  env.erase("SLURM_JOB_ID");
  EXPECT_MENTIONS(error_of(env), "SLURM_JOB_ID is not set");
  // ... unless the port and the job id are given.
  env["EAGERCOMM_MASTER_PORT"] = "7000";
  env["EAGERCOMM_JOB_ID"] = "mine";
  auto info = discover(env);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->store_port, 7000);
  EXPECT_EQ(info->job_id, "mine");
  EXPECT_MENTIONS(error_of(join(kSlurm, {{"SLURM_LOCALID", "2"}})), "SLURM_LOCALID=2");
}

// ---- 4. torchrun ----

const Env kTorchrun = {
    {"RANK", "3"},
    {"WORLD_SIZE", "4"},
    {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "2"},
    {"MASTER_ADDR", "10.1.2.3"},
    {"MASTER_PORT", "29500"},
    {"TORCHELASTIC_RUN_ID", "abc.def"},
};

TEST(LaunchEnv, TorchrunVariables) {
  auto info = discover(kTorchrun);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "torchrun");
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);
  EXPECT_EQ(info->store_host, "10.1.2.3");
  EXPECT_EQ(info->store_port, 29501) << "torchrun's own store owns MASTER_PORT";
  EXPECT_EQ(info->job_id, "torchrun-abc_def");
  EXPECT_FALSE(info->serve_store);
  auto rank0 = discover(join(kTorchrun, {{"RANK", "0"}, {"TORCHELASTIC_RUN_ID", "none"}}));
  ASSERT_TRUE(rank0.ok());
  EXPECT_TRUE(rank0->serve_store);
  EXPECT_EQ(rank0->job_id, "torchrun-10_1_2_3-29500");
  // By hand: no local variables means every rank alone on its host.
  auto manual =
      discover({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "600"}});
  ASSERT_TRUE(manual.ok()) << manual.status().to_string();
  EXPECT_EQ(manual->local_rank, 0);
  EXPECT_EQ(manual->local_size, 1);
  EXPECT_EQ(manual->store_port, 601);
}

TEST(LaunchEnv, TorchrunErrors) {
  Env env = kTorchrun;
  env.erase("MASTER_PORT");
  EXPECT_MENTIONS(error_of(env), "MASTER_PORT is not set");
  env = kTorchrun;
  env.erase("MASTER_ADDR");
  EXPECT_MENTIONS(error_of(env), "MASTER_ADDR is not set");
  env = kTorchrun;
  env.erase("WORLD_SIZE");
  EXPECT_MENTIONS(error_of(env), "WORLD_SIZE is not set");
  env = kTorchrun;
  env.erase("RANK");
  EXPECT_MENTIONS(error_of(env), "RANK is not set");
  EXPECT_MENTIONS(error_of(join(kTorchrun, {{"MASTER_PORT", "65535"}})), "MASTER_PORT=65535");
  EXPECT_MENTIONS(error_of(join(kTorchrun, {{"MASTER_PORT", "http"}})), "MASTER_PORT='http'");
  EXPECT_MENTIONS(error_of(join(kTorchrun, {{"LOCAL_RANK", "2"}})), "LOCAL_RANK=2");
  EXPECT_MENTIONS(error_of(join(kTorchrun, {{"WORLD_SIZE", "0"}})), "WORLD_SIZE='0'");
  // Empty values count as unset.
  EXPECT_MENTIONS(error_of(join(kTorchrun, {{"WORLD_SIZE", ""}})), "WORLD_SIZE is not set");
}

// ---- which source wins ----

TEST(LaunchEnv, Precedence) {
  // EAGERCOMM_RANK beats every launcher.
  auto info = discover(join(join(kOpenMpi, kSlurm), kEagercommRun));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->launcher, "eagercomm-run");
  EXPECT_EQ(info->rank, 2);
  // Open MPI beats Slurm (mpirun inside an allocation, srun --mpi=pmix), Slurm beats torchrun.
  EXPECT_EQ(discover(join(kOpenMpi, kSlurm))->launcher, "open-mpi");
  EXPECT_EQ(discover(join(kSlurm, kTorchrun))->launcher, "slurm");
  // EAGERCOMM_* rows set in the environment win over the launcher's own variables.
  info = discover(join(kTorchrun, {{"EAGERCOMM_MASTER_PORT", "4000"},
                                   {"EAGERCOMM_MASTER_ADDR", "store-host"},
                                   {"EAGERCOMM_JOB_ID", "custom_1"},
                                   {"EAGERCOMM_SIZE", "6"},
                                   {"EAGERCOMM_LOCAL_RANK", "0"},
                                   {"EAGERCOMM_LOCAL_SIZE", "3"}}));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->store_port, 4000);
  EXPECT_EQ(info->store_host, "store-host");
  EXPECT_EQ(info->job_id, "custom_1");
  EXPECT_EQ(info->size, 6);
  EXPECT_EQ(info->local_rank, 0);
  EXPECT_EQ(info->local_size, 3);
  info = discover(join(kOpenMpi, {{"EAGERCOMM_LOCAL_SIZE", "2"}, {"EAGERCOMM_SIZE", "16"}}));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->size, 16);
  EXPECT_EQ(info->local_size, 2);
  info = discover(join(kSlurm, {{"EAGERCOMM_MASTER_ADDR", "fixed"}}));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->store_host, "fixed");
  // An override that makes no sense is still checked, naming where each number came from.
  const std::string err = error_of(join(kSlurm, {{"EAGERCOMM_SIZE", "4"}}));
  EXPECT_MENTIONS(err, "SLURM_PROCID=5");
  EXPECT_MENTIONS(err, "EAGERCOMM_SIZE=4");
}

TEST(LaunchEnv, LauncherJobIdsAreSanitizedAndBounded) {
  auto info = discover(join(kTorchrun, {{"TORCHELASTIC_RUN_ID", std::string(300, 'x') + "/.."}}));
  ASSERT_TRUE(info.ok());
  EXPECT_LE(info->job_id.size(), 128u);
  EXPECT_TRUE(all_chars(info->job_id, "id")) << info->job_id;
  auto other = discover(join(kTorchrun, {{"TORCHELASTIC_RUN_ID", std::string(300, 'x') + "/.!"}}));
  EXPECT_NE(info->job_id, other->job_id) << "long ids that differ late must stay distinct";
}

// ---- helpers ----

TEST(LaunchEnv, SlurmFirstHost) {
  EXPECT_EQ(slurm_first_host("node[01-03,07],gpu5"), "node01");
  EXPECT_EQ(slurm_first_host("node[01-03]"), "node01");
  EXPECT_EQ(slurm_first_host("a[1,3],b"), "a1");
  EXPECT_EQ(slurm_first_host("host-7"), "host-7");
  EXPECT_EQ(slurm_first_host("n[009-011]"), "n009");
  EXPECT_EQ(slurm_first_host("a,b"), "a");
  EXPECT_EQ(slurm_first_host("x"), "x");
  EXPECT_EQ(slurm_first_host("rack[1-2]-n[5-6]"), "rack1-n5");
  EXPECT_EQ(slurm_first_host("broken[1-2"), "broken");
  EXPECT_EQ(slurm_first_host(""), "");
}

TEST(LaunchEnv, SlurmTasksOnNode) {
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0).value(), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2).value(), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3).value(), 1);
  EXPECT_EQ(slurm_tasks_on_node("16", 0).value(), 16);
  Result<int> beyond = slurm_tasks_on_node("2(x3),1", 4);
  ASSERT_FALSE(beyond.ok());
  EXPECT_MENTIONS(beyond.status().message(), "no node 4 (it lists 4)");
  for (const char* bad : {"", "x", "0", "2(x", "2(3)", "2(x0)", "2,,1", "-1"}) {
    EXPECT_FALSE(slurm_tasks_on_node(bad, 0).ok()) << "'" << bad << "' accepted";
  }
}

TEST(LaunchEnv, ProcessEnvironment) {
  ASSERT_EQ(::setenv("EAGERCOMM_LAUNCH_ENV_TEST", "a=b", 1), 0);
  const auto env = process_environment();
  ASSERT_EQ(env.count("EAGERCOMM_LAUNCH_ENV_TEST"), 1u);
  EXPECT_EQ(env.at("EAGERCOMM_LAUNCH_ENV_TEST"), "a=b");
  ::unsetenv("EAGERCOMM_LAUNCH_ENV_TEST");
}

}  // namespace
}  // namespace eagercomm
