// eagercomm-run's job: starts the ranks, forwards signals, prints their output, watches the
// deadlines and the ranks' exits, and decides the launcher's exit status.
//
// One thread and one poll() loop. Ranks are started one after the other, with the loop's work
// (signals, output, exits, the deadline) done between two starts, so a slow start neither
// postpones --timeout (it counts from the launch) nor leaves a failure or a signal waiting.
// Whether a rank's execve() worked comes back through a close-on-exec pipe that the loop
// watches like the output pipes.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/unique_fd.h"
#include "tools/run_join_watch.h"
#include "tools/run_options.h"
#include "tools/run_output.h"

namespace eagercomm::run {

using Clock = std::chrono::steady_clock;

// Everything prepared before fork(): the child may only make async-signal-safe calls (the
// store server's thread is running), so no allocation happens after fork.
struct Exec {
  std::string path;
  std::vector<std::string> argv_storage;
  std::vector<std::vector<std::string>> env_storage;  // per rank
  std::vector<char*> argv;
  std::vector<std::vector<char*>> envs;  // per rank, into env_storage
};

// Null-terminated pointers into `strings` (which must outlive them).
std::vector<char*> pointers(std::vector<std::string>& strings);

class Launcher {
 public:
  // `launched` is when the launcher started: --timeout counts from then. `joins` (may be null)
  // tells which ranks joined the job.
  Launcher(Options options, std::string job_id, sigset_t child_mask, int signal_fd,
           Clock::time_point launched, JoinWatch* joins);
  // Stops and reaps whatever is still running (an early return must not leave ranks behind).
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Starts every rank and runs until all are gone and their output printed; returns the
  // launcher's exit code.
  int run(const Exec& exec);

 private:
  struct Rank {
    int index = 0;
    pid_t pid = -1;  // also its process group id
    bool running = false;
    UniqueFd exec_result;  // open until execve() worked (end of file) or failed (its errno)
    std::vector<OutputStream> streams;
  };
  // A rank that exited with code 0 before it joined, while the job may still need it.
  struct EarlyExit {
    int index;
    pid_t pid;
  };

  bool start_rank(int index, const Exec& exec, bool take_stdin);
  bool start_failed(int index, const std::string& why);
  // One pass of the loop; false when the job is over. `block`: wait in poll() for the next
  // event or deadline (else only look).
  bool step(bool block);
  int poll_timeout() const;
  void exec_result(Rank& r);
  void signal_all(int sig);
  void stop();
  void on_signals();
  void reap();
  void rank_exited(Rank& r, int status);
  void check_early_exits();
  void on_timeout();
  void explain_no_start();
  int exit_code() const;

  Options o_;
  std::string job_id_;
  sigset_t child_mask_;
  int signal_fd_;
  Clock::time_point launched_;
  JoinWatch* joins_;
  std::string program_;  // what the ranks run (for messages)
  RepeatFilter repeats_;
  std::vector<Rank> ranks_;
  int exec_failures_ = 0;
  bool starting_ = true;
  bool stopping_ = false;
  bool timed_out_ = false;
  int signals_received_ = 0;
  int forwarded_signal_ = 0;
  std::optional<int> failure_code_;
  Clock::time_point failure_at_;
  bool failure_by_signal_ = false;
  std::vector<EarlyExit> early_exits_;
  bool store_in_use_ = false;  // some rank began to join: the job bootstraps through our store
  std::optional<Clock::time_point> job_deadline_, stop_deadline_, kill_deadline_, drain_deadline_,
      early_check_;
};

}  // namespace eagercomm::run
