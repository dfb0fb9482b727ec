// eagercomm-run: starts the N ranks of a job on this host, like torchrun's standalone mode.
//
//   eagercomm-run -n N [--transport T] [--timeout DURATION] [--no-prefix] [--] prog args...
//
// It serves the job's bootstrap store (a TcpStoreServer on 127.0.0.1, a random job token), then
// starts every rank with the EAGERCOMM_* job variables (and torchrun's, for Python users), each
// in its own process group. Rank output is printed line by line with a "[rank] " prefix.
// SIGINT, SIGTERM and SIGHUP are forwarded to every rank. The first rank that fails (non-zero
// exit or killed) stops the job: the others first get --stop-delay (default 2 s) to notice the
// failure and exit on their own, which lets them report which peer died, then SIGTERM, then
// SIGKILL after a grace period; the launcher exits with the failed rank's code (128 + signal
// when killed). A rank that exits 0 before joining the job, while others joined it, is a
// failure too (reported at once; exit 1): the others would wait for it (tools/run_join_watch.h).
// Exit codes of the launcher itself: 1 it failed, 2 bad usage, 124 --timeout expired (counted
// from the launch), 127 program not found or not executable. Repeats of one eagercomm log line
// from many ranks are counted, not printed (tools/run_output.h). At exit the job's leftover
// shared-memory segments (/dev/shm/eagercomm-<job>-*) are removed; at the start, those that dead
// jobs left (their ranks' liveness beacons are free: transport/shm/shm_reclaim.h).
//
// Standard input: rank 0 reads the launcher's standard input when that is not a terminal (a
// pipe or a file, as mpirun does); every other rank, and rank 0 under a terminal (ranks are not
// in the terminal's foreground group), reads /dev/null.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "collectives/config.h"
#include "runtime/tcp_store.h"
#include "runtime/unique_fd.h"
#include "tools/run_join_watch.h"
#include "tools/run_launcher.h"
#include "tools/run_options.h"
#include "tools/run_support.h"
#include "transport/shm/shm_reclaim.h"

namespace eagercomm::run {
namespace {

int run_main(int argc, char** argv) {
  const Clock::time_point launched = Clock::now();  // --timeout counts from here
  int exit_code = 0;
  std::optional<Options> options = parse_options(argc, argv, exit_code);
  if (!options) return exit_code;
  const Result<Config>& config = Config::process();  // also configures the logger
  if (!config.ok()) {
    std::fprintf(stderr, "eagercomm-run: %s\n", config.status().message().c_str());
    return kExitUsage;
  }
  Result<std::string> path = resolve_program(options->argv[0]);
  if (!path.ok()) {
    std::fprintf(stderr, "eagercomm-run: %s\n", path.status().message().c_str());
    return kExitNotFound;
  }

  // Signals are taken through a signalfd. Block them before any thread exists (the store
  // server's), so that no thread gets them asynchronously; ranks get the original mask back.
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  if (::sigprocmask(SIG_BLOCK, &mask, &old_mask) != 0) {
    std::fprintf(stderr, "eagercomm-run: sigprocmask failed: %s\n", strerror(errno));
    return kExitFailure;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher and orphan the job
  UniqueFd signal_fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd.valid()) {
    std::fprintf(stderr, "eagercomm-run: signalfd failed: %s\n", strerror(errno));
    return kExitFailure;
  }

  // What earlier jobs that died with their launcher left behind (SIGKILL of a launcher kills
  // its ranks without cleanup). Only objects whose owner is provably gone go.
  if (const ShmReclaimed r = shm_reclaim_dead_jobs(); r.objects > 0) {
    std::fprintf(stderr,
                 "eagercomm-run: removed %d shared-memory object(s) (%.1f MB) that %d dead "
                 "rank(s) of earlier jobs left in /dev/shm\n",
                 r.objects, static_cast<double>(r.bytes) / 1e6, r.owners);
  }

  Result<std::string> token = random_hex(16);
  Result<std::string> job_hex = random_hex(6);
  if (!token.ok() || !job_hex.ok()) {
    std::fprintf(stderr, "eagercomm-run: %s\n",
                 (token.ok() ? job_hex.status() : token.status()).message().c_str());
    return kExitFailure;
  }
  const std::string job_id = "run-" + *job_hex;
  auto server = TcpStoreServer::start("127.0.0.1", 0, *token);
  if (!server.ok()) {
    std::fprintf(stderr, "eagercomm-run: cannot start the job's store: %s\n",
                 server.status().message().c_str());
    return kExitFailure;
  }
  Result<uint16_t> torch_port = free_port();
  if (!torch_port.ok()) {
    std::fprintf(stderr, "eagercomm-run: %s\n", torch_port.status().message().c_str());
    return kExitFailure;
  }
  // The launcher's own view of the store: which ranks joined. Without it the job still runs,
  // only a rank that leaves before joining is then noticed by the others at their timeout.
  Result<std::unique_ptr<JoinWatch>> joins =
      JoinWatch::connect(server.value()->port(), *token, job_id);
  if (!joins.ok()) {
    std::fprintf(stderr, "eagercomm-run: cannot watch the job's store: %s\n",
                 joins.status().message().c_str());
  }

  Exec exec;
  exec.path = *path;
  exec.argv_storage = options->argv;
  exec.argv = pointers(exec.argv_storage);
  for (int r = 0; r < options->ranks; ++r) {
    exec.env_storage.push_back(
        rank_environment(*options, r, server.value()->port(), *torch_port, job_id, *token));
  }
  for (auto& env : exec.env_storage) exec.envs.push_back(pointers(env));

  int code = 0;
  {
    Launcher launcher(*options, job_id, old_mask, signal_fd.get(), launched,
                      joins.ok() ? joins.value().get() : nullptr);
    code = launcher.run(exec);
  }
  if (const int removed = remove_job_segments(job_id); removed > 0) {
    std::fprintf(stderr, "eagercomm-run: removed %d leftover shared-memory segment(s) of job %s\n",
                 removed, job_id.c_str());
  }
  return code;
}

}  // namespace
}  // namespace eagercomm::run

int main(int argc, char** argv) { return eagercomm::run::run_main(argc, argv); }
