#include "tools/run_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "runtime/config.h"
#include "runtime/deadline.h"
#include "tools/run_support.h"

namespace eagercomm::run {
namespace {

using std::chrono::nanoseconds;

// How long stopped ranks get between SIGTERM and SIGKILL.
constexpr nanoseconds kGrace = std::chrono::seconds(3);
// How long output pipes may stay open after every rank is gone (a process that left the rank's
// process group can hold them): then they are closed.
constexpr nanoseconds kDrain = std::chrono::seconds(2);
// A rank killed by a signal and reaped this soon after another rank's error exit is the
// failure's cause: survivors notice a death in milliseconds and may exit first.
constexpr nanoseconds kCauseWindow = std::chrono::milliseconds(500);
// Ranks that exited 0 before joining are looked at again this often until some rank is seen
// beginning to join (then the others need them) or nobody is left to wait for them.
constexpr nanoseconds kEarlyExitRecheck = std::chrono::milliseconds(500);
// Running ranks asked per look whether they began to join (a missing key costs a round trip).
constexpr int kBeganProbes = 4;
// How long the explanation of a job that could not start may ask the store, and how many
// ranks it names.
constexpr nanoseconds kExplainBudget = std::chrono::seconds(3);
constexpr int kNamedRanks = 16;

std::string rank_list(const std::vector<int>& ranks, size_t total) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  if (total > ranks.size()) out += ", ... (" + std::to_string(total) + " in all)";
  return out;
}

}  // namespace

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

Launcher::Launcher(Options options, std::string job_id, sigset_t child_mask, int signal_fd,
                   Clock::time_point launched, JoinWatch* joins)
    : o_(std::move(options)),
      job_id_(std::move(job_id)),
      child_mask_(child_mask),
      signal_fd_(signal_fd),
      launched_(launched),
      joins_(joins),
      repeats_(o_.ranks) {
  // Reserved, so that ranks never move while the loop holds pointers to their streams.
  ranks_.reserve(static_cast<size_t>(o_.ranks));
}

Launcher::~Launcher() {
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    ::kill(-r.pid, SIGKILL);
    ::waitpid(r.pid, nullptr, 0);
  }
}

int Launcher::run(const Exec& exec) {
  program_ = exec.path;
  if (o_.timeout > nanoseconds::zero()) job_deadline_ = deadline_in(o_.timeout, launched_);
  const bool stdin_to_rank0 = !::isatty(STDIN_FILENO);
  for (int r = 0; r < o_.ranks; ++r) {
    // What happened meanwhile first: a signal, the deadline or a failure ends the start.
    step(false);
    if (stopping_ || failure_code_) break;
    if (!start_rank(r, exec, r == 0 && stdin_to_rank0)) break;
  }
  starting_ = false;
  while (step(true)) {
  }
  repeats_.report(STDERR_FILENO);
  return exit_code();
}

bool Launcher::start_rank(int index, const Exec& exec, bool take_stdin) {
  Rank rank;
  rank.index = index;
  std::optional<Pipe> out, err;
  if (o_.prefix) {
    out = make_pipe();
    err = make_pipe();
  }
  std::optional<Pipe> exec_error = make_pipe();
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if ((o_.prefix && (!out || !err)) || !exec_error || !null_fd.valid()) {
    return start_failed(index, std::string("cannot create pipes: ") + strerror(errno));
  }
  char* const* env = exec.envs[static_cast<size_t>(index)].data();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return start_failed(index, std::string("fork failed: ") + strerror(errno));
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    ::setpgid(0, 0);
    // Die with the launcher, even when it is SIGKILLed (then nobody forwards anything).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(kExitNotFound);
    if (!take_stdin) ::dup2(null_fd.get(), STDIN_FILENO);
    if (o_.prefix) {
      ::dup2(out->write.get(), STDOUT_FILENO);
      ::dup2(err->write.get(), STDERR_FILENO);
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);  // ignored by the launcher: do not pass that on
    ::sigprocmask(SIG_SETMASK, &child_mask_, nullptr);
    ::execve(exec.path.c_str(), exec.argv.data(), env);
    const int e = errno;
    [[maybe_unused]] ssize_t w = ::write(exec_error->write.get(), &e, sizeof(e));
    ::_exit(kExitNotFound);
  }
  ::setpgid(pid, pid);  // also here, so a signal sent right away reaches the group
  rank.pid = pid;
  rank.running = true;
  if (o_.prefix) {
    out->write.reset();
    err->write.reset();
    const std::string prefix = "[" + std::to_string(index) + "] ";
    rank.streams.emplace_back(std::move(out->read), STDOUT_FILENO, index, prefix, &repeats_);
    rank.streams.emplace_back(std::move(err->read), STDERR_FILENO, index, prefix, &repeats_);
  }
  // Closes on a successful exec; otherwise it carries errno. The loop watches it: waiting here
  // for each exec would make the start of N ranks take N scheduling delays of a busy host.
  exec_error->write.reset();
  rank.exec_result = std::move(exec_error->read);
  ranks_.push_back(std::move(rank));
  return true;
}

bool Launcher::start_failed(int index, const std::string& why) {
  std::fprintf(stderr, "eagercomm-run: cannot start rank %d: %s\n", index, why.c_str());
  if (!failure_code_) failure_code_ = kExitFailure;
  stop();
  return false;
}

bool Launcher::step(bool block) {
  const bool live =
      std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
  if (!starting_ && !live && !drain_deadline_) drain_deadline_ = Clock::now() + kDrain;
  // What each pollfd after the signalfd is: an output stream, or a rank's exec result.
  struct Source {
    OutputStream* stream;
    Rank* rank;
  };
  std::vector<pollfd> fds;
  std::vector<Source> sources;
  fds.push_back({signal_fd_, POLLIN, 0});
  for (Rank& r : ranks_) {
    for (OutputStream& s : r.streams) {
      if (!s.open()) continue;
      fds.push_back({s.fd(), POLLIN, 0});
      sources.push_back({&s, nullptr});
    }
    if (r.exec_result.valid()) {
      fds.push_back({r.exec_result.get(), POLLIN, 0});
      sources.push_back({nullptr, &r});
    }
  }
  if (!starting_ && !live && sources.empty()) return false;
  const Clock::time_point now = Clock::now();
  if (drain_deadline_ && now >= *drain_deadline_) {
    for (const Source& s : sources) {
      if (s.stream != nullptr) s.stream->close();
    }
    return false;
  }
  if (job_deadline_ && !stopping_ && now >= *job_deadline_) on_timeout();
  if (stop_deadline_ && !stopping_ && now >= *stop_deadline_) {
    std::fprintf(stderr, "eagercomm-run: ranks still running %s after the failure; stopping them\n",
                 format_duration(o_.stop_delay).c_str());
    stop();
  }
  if (kill_deadline_ && now >= *kill_deadline_) {
    signal_all(SIGKILL);
    kill_deadline_.reset();
  }
  if (early_check_ && now >= *early_check_) check_early_exits();
  const int n = ::poll(fds.data(), fds.size(), block ? poll_timeout() : 0);
  if (n < 0 && errno != EINTR) {
    std::fprintf(stderr, "eagercomm-run: poll failed: %s\n", strerror(errno));
    if (!failure_code_) failure_code_ = kExitFailure;
    signal_all(SIGKILL);
    for (Rank& r : ranks_) {
      if (r.running && ::waitpid(r.pid, nullptr, 0) == r.pid) r.running = false;
    }
    return false;
  }
  if (n <= 0) return true;
  if (fds[0].revents & POLLIN) on_signals();
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const Source& s = sources[i - 1];
    if (s.stream != nullptr) {
      if (s.stream->open()) s.stream->on_readable();
    } else if (s.rank->exec_result.valid() && s.rank->exec_result.get() == fds[i].fd) {
      exec_result(*s.rank);
    }
  }
  return true;
}

int Launcher::poll_timeout() const {
  std::optional<Clock::time_point> next;
  const auto consider = [&](const std::optional<Clock::time_point>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (!stopping_) consider(job_deadline_);
  if (!stopping_) consider(stop_deadline_);
  consider(kill_deadline_);
  consider(drain_deadline_);
  consider(early_check_);
  return poll_timeout_ms(next.value_or(kForever));
}

void Launcher::exec_result(Rank& r) {
  int e = 0;
  ssize_t n;
  do {
    n = ::read(r.exec_result.get(), &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  r.exec_result.reset();
  if (n != static_cast<ssize_t>(sizeof(e))) return;  // end of file: execve() worked
  // Every rank runs the same program: one line says it, the first failure is the job's.
  if (++exec_failures_ == 1) {
    std::fprintf(stderr, "eagercomm-run: rank %d: cannot execute '%s': %s\n", r.index,
                 program_.c_str(), strerror(e));
  }
  if (!failure_code_) failure_code_ = kExitNotFound;
  stop();
}

void Launcher::signal_all(int sig) {
  for (const Rank& r : ranks_) {
    if (r.running) ::kill(-r.pid, sig);
  }
}

// Stops the job: SIGTERM now, SIGKILL after the grace period.
void Launcher::stop() {
  if (stopping_) return;
  stopping_ = true;
  signal_all(SIGTERM);
  kill_deadline_ = Clock::now() + kGrace;
}

void Launcher::on_signals() {
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      reap();
      continue;
    }
    ++signals_received_;
    if (forwarded_signal_ == 0) forwarded_signal_ = sig;
    if (signals_received_ == 1) {
      std::fprintf(stderr, "eagercomm-run: got %s; forwarding it to the ranks\n",
                   signal_text(sig).c_str());
      signal_all(sig);
      // Ranks that keep running anyway are stopped after the grace period.
      stopping_ = true;
      kill_deadline_ = Clock::now() + kGrace;
    } else {
      std::fprintf(stderr, "eagercomm-run: got %s again; killing the ranks\n",
                   signal_text(sig).c_str());
      signal_all(SIGKILL);
    }
  }
}

// Reaps every rank that exited. While a rank is a zombie its process group id cannot be reused,
// so that is the moment to kill what it left behind in its group.
void Launcher::reap() {
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    ::kill(-pid, SIGKILL);
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return;
    for (Rank& r : ranks_) {
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      // A failed execve() is said as such, not as the exit code it makes.
      if (r.exec_result.valid()) exec_result(r);
      rank_exited(r, status);
    }
  }
}

void Launcher::rank_exited(Rank& r, int status) {
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  // A survivor can notice a killed peer (and exit with an error) before this launcher reaps the
  // killed rank: a death by signal reaped just after an error exit is the cause.
  if (!ok && failure_code_ && !failure_by_signal_ && WIFSIGNALED(status) && !stopping_ &&
      Clock::now() - failure_at_ < kCauseWindow) {
    failure_code_ = 128 + WTERMSIG(status);
    failure_by_signal_ = true;
    std::fprintf(stderr, "eagercomm-run: rank %d (pid %d) was killed by %s (the failure's cause)\n",
                 r.index, static_cast<int>(r.pid), signal_text(WTERMSIG(status)).c_str());
    return;
  }
  // Ranks ending because the job is being stopped (timeout, signal, another rank's failure) are
  // not failures of their own.
  if (failure_code_ || stopping_) return;
  if (ok) {
    // Fine if it had joined the job; if not, the ranks that did would wait for it. Which one it
    // is, is asked of the store in the loop, not here (check_early_exits()).
    if (joins_ != nullptr && o_.ranks > 1) {
      early_exits_.push_back({r.index, r.pid});
      if (!early_check_) early_check_ = Clock::now();
    }
    return;
  }
  failure_at_ = Clock::now();
  failure_by_signal_ = WIFSIGNALED(status);
  const bool others =
      std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& x) { return x.running; });
  std::string how;
  if (WIFEXITED(status)) {
    failure_code_ = WEXITSTATUS(status);
    how = "exited with code " + std::to_string(WEXITSTATUS(status));
  } else {
    failure_code_ = 128 + WTERMSIG(status);
    how = "was killed by " + signal_text(WTERMSIG(status));
  }
  std::fprintf(stderr, "eagercomm-run: rank %d (pid %d) %s%s\n", r.index, static_cast<int>(r.pid),
               how.c_str(),
               !others         ? ""
               : o_.keep_going ? "; the others run on (--keep-going)"
                               : "; stopping the other ranks");
  if (o_.keep_going) return;
  // The others get a moment to see the failure themselves (a collective with the failed rank
  // returns an error naming it), then they are stopped.
  if (o_.stop_delay > nanoseconds::zero()) {
    stop_deadline_ = deadline_in(o_.stop_delay);
  } else {
    stop();
  }
}

// Ranks that exited 0: a failure of the job when they had not joined it while it bootstraps
// through this launcher's store (some rank began to join). A program that never uses the store
// (a shell command on every rank) is never failed for it.
void Launcher::check_early_exits() {
  early_check_.reset();
  if (early_exits_.empty()) return;
  if (stopping_ || failure_code_ || joins_ == nullptr) {
    early_exits_.clear();
    return;
  }
  const bool others = starting_ || std::any_of(ranks_.begin(), ranks_.end(),
                                               [](const Rank& x) { return x.running; });
  if (!others) {  // nobody left to wait for them
    early_exits_.clear();
    return;
  }
  if (!store_in_use_) {
    int probes = 0;
    for (const Rank& x : ranks_) {
      if (!x.running) continue;
      if (joins_->began(x.index)) {
        store_in_use_ = true;
        break;
      }
      if (++probes == kBeganProbes) break;
    }
  }
  if (!store_in_use_) {
    // Nobody is seen joining (yet): look again later, while someone could still wait for them.
    early_check_ = Clock::now() + kEarlyExitRecheck;
    return;
  }
  std::vector<EarlyExit> gone;
  for (const EarlyExit& e : early_exits_) {
    if (!joins_->joined(e.index)) gone.push_back(e);
  }
  early_exits_.clear();
  if (gone.empty()) return;
  const EarlyExit& first = gone.front();
  std::fprintf(stderr,
               "eagercomm-run: rank %d (pid %d) exited with code 0 before joining the job; the "
               "ranks that joined would wait for it: stopping the job\n",
               first.index, static_cast<int>(first.pid));
  if (gone.size() > 1) {
    std::vector<int> more;
    for (size_t i = 1; i < gone.size() && more.size() < kNamedRanks; ++i) {
      more.push_back(gone[i].index);
    }
    std::fprintf(stderr, "eagercomm-run: also exited with code 0 before joining: rank(s) %s\n",
                 rank_list(more, gone.size() - 1).c_str());
  }
  // The waiting ranks see it in the store within 50 ms and fail naming the rank.
  for (const EarlyExit& e : gone) {
    joins_->report_gone(e.index,
                        "it exited with code 0 before joining the job (eagercomm-run saw it)");
  }
  failure_code_ = kExitFailure;
  failure_at_ = Clock::now();
  failure_by_signal_ = false;
  if (o_.stop_delay > nanoseconds::zero()) {
    stop_deadline_ = deadline_in(o_.stop_delay);
  } else {
    stop();
  }
}

void Launcher::on_timeout() {
  std::fprintf(stderr, "eagercomm-run: job %s timed out after %s; stopping the ranks\n",
               job_id_.c_str(), format_duration(o_.timeout).c_str());
  explain_no_start();
  timed_out_ = true;
  stop();
}

// At the timeout: if the job never got going, one line says how far it got.
void Launcher::explain_no_start() {
  const int started = static_cast<int>(ranks_.size());
  if (started < o_.ranks) {
    std::fprintf(stderr,
                 "eagercomm-run: the job could not start: %d of %d ranks had been started when "
                 "the timeout expired\n",
                 started, o_.ranks);
  }
  if (joins_ == nullptr || started == 0) return;
  // Each started rank: joined, began to join (and waits for the others), or neither.
  const Clock::time_point budget_end = Clock::now() + kExplainBudget;
  int joined = 0, asked = 0;
  std::vector<int> waiting, absent;
  size_t waiting_count = 0, absent_count = 0;
  for (int r = 0; r < started && Clock::now() < budget_end; ++r, ++asked) {
    if (joins_->joined(r)) {
      ++joined;
    } else if (joins_->began(r)) {
      if (waiting.size() < kNamedRanks) waiting.push_back(r);
      ++waiting_count;
    } else {
      if (absent.size() < kNamedRanks) absent.push_back(r);
      ++absent_count;
    }
  }
  if (joined == o_.ranks) return;  // it started; it only ran too long
  if (joined == 0 && waiting_count == 0 && asked == started) {
    std::fprintf(stderr,
                 "eagercomm-run: no rank had begun to join the job by then (nothing under %s in "
                 "its store): the ranks were still starting up, or do not use "
                 "Communicator::from_env()\n",
                 joins_->scope().c_str());
    return;
  }
  const auto list = [](const std::vector<int>& ranks, size_t total) {
    return total == 0 ? std::string("none") : rank_list(ranks, total);
  };
  const std::string unasked =
      asked < started ? " (ranks " + std::to_string(asked) + " and up not asked)" : "";
  std::fprintf(stderr,
               "eagercomm-run: the job could not start within %s: %d of %d ranks joined it; "
               "waiting for the others: %s; not begun to join: %s%s\n",
               format_duration(o_.timeout).c_str(), joined, o_.ranks,
               list(waiting, waiting_count).c_str(), list(absent, absent_count).c_str(),
               unasked.c_str());
}

int Launcher::exit_code() const {
  if (timed_out_) return kExitTimeout;
  if (failure_code_) return *failure_code_;
  if (forwarded_signal_ != 0) return 128 + forwarded_signal_;
  return 0;
}

}  // namespace eagercomm::run
