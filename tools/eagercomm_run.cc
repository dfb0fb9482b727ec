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
// when killed). Exit codes of the
// launcher itself: 2 bad usage, 124 --timeout expired, 127 program not found or not executable.
// At exit the job's leftover shared-memory segments (/dev/shm/eagercomm-<job>-*) are removed.
//
// Standard input: rank 0 reads the launcher's standard input when that is not a terminal (a
// pipe or a file, as mpirun does); every other rank, and rank 0 under a terminal (ranks are not
// in the terminal's foreground group), reads /dev/null.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/config.h"
#include "runtime/tcp_store.h"
#include "runtime/unique_fd.h"

extern char** environ;  // POSIX: the process environment, declared by no standard header.

namespace eagercomm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitNotFound = 127;
constexpr int kMaxRanks = 4096;
// How long stopped ranks get between SIGTERM and SIGKILL.
constexpr nanoseconds kGrace = std::chrono::seconds(3);
// How long output pipes may stay open after every rank is gone (a process that left the rank's
// process group can hold them): then they are closed.
constexpr nanoseconds kDrain = std::chrono::seconds(2);
// A line longer than this is printed in pieces, each with the prefix.
constexpr size_t kMaxLineBytes = 64 * 1024;

void usage(FILE* out) {  // --help
  std::fprintf(
      out,
      "usage: eagercomm-run -n N [--transport T] [--timeout DURATION] [--stop-delay DURATION]\n"
      "                     [--no-prefix] [--] prog args...\n"
      "  -n, --nproc N       number of ranks to start on this host (1..%d)\n"
      "  --transport T       set EAGERCOMM_TRANSPORT for every rank (auto|inproc|shm|ucx|verbs)\n"
      "  --timeout DURATION  stop the job after this long and exit 124 (30s, 5m; 0: never)\n"
      "  --stop-delay DURATION\n"
      "                      when a rank fails, how long the others may run on to notice it\n"
      "                      and exit by themselves before they get SIGTERM (default 2s)\n"
      "  --no-prefix         do not prefix output lines with \"[rank] \"\n"
      "  -h, --help          this text\n"
      "Every rank gets EAGERCOMM_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _MASTER_ADDR,\n"
      "_MASTER_PORT, _JOB_ID, _JOB_TOKEN and torchrun's RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Exit status: the first failed rank's (128 +\n"
      "signal if it was killed; a rank killed by a signal within 0.5 s after another rank's error\n"
      "exit counts as the first), 124 on --timeout, 127 if prog cannot be run, 2 on bad usage.\n",
      kMaxRanks);
}

int usage_error(const std::string& message) {
  std::fprintf(stderr,
               "eagercomm-run: %s\n"
               "usage: eagercomm-run -n N [--transport T] [--timeout DURATION] [--no-prefix] [--] "
               "prog args... (--help: more)\n",
               message.c_str());
  return kExitUsage;
}

struct Options {
  int ranks = 0;
  std::string transport;   // empty: not given
  nanoseconds timeout{0};  // 0: none
  nanoseconds stop_delay = std::chrono::seconds(2);
  bool prefix = true;
  std::vector<std::string> argv;
};

// Parses the command line; nullopt with `exit_code` set when the launcher must exit now.
std::optional<Options> parse_options(int argc, char** argv, int& exit_code) {
  Options o;
  bool have_n = false;
  int i = 1;
  // "--flag value", "--flag=value" and, for -n, "-nVALUE".
  auto value_of = [&](std::string_view arg, std::string_view name,
                      std::optional<std::string>& value) -> bool {
    if (arg == name) {
      if (i + 1 >= argc) {
        exit_code = usage_error(std::string(name) + " needs a value");
        return false;
      }
      value = argv[++i];
      return true;
    }
    if (arg.size() > name.size() + 1 && arg.starts_with(name) && arg[name.size()] == '=') {
      value = std::string(arg.substr(name.size() + 1));
      return true;
    }
    if (name == "-n" && arg.size() > 2 && arg.starts_with("-n")) {
      value = std::string(arg.substr(2));
      return true;
    }
    return true;
  };
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      exit_code = 0;
      return std::nullopt;
    }
    if (arg == "--no-prefix") {
      o.prefix = false;
      continue;
    }
    std::optional<std::string> value;
    bool matched = false;
    for (std::string_view name : {"-n", "--nproc", "--transport", "--timeout", "--stop-delay"}) {
      if (!value_of(arg, name, value)) return std::nullopt;
      if (!value) continue;
      matched = true;
      if (name == "-n" || name == "--nproc") {
        int n = 0;
        const char* end = value->data() + value->size();
        const auto r = std::from_chars(value->data(), end, n);
        if (r.ec != std::errc() || r.ptr != end || n < 1 || n > kMaxRanks) {
          exit_code = usage_error("-n '" + *value + "' is not a number of ranks in 1.." +
                                  std::to_string(kMaxRanks));
          return std::nullopt;
        }
        o.ranks = n;
        have_n = true;
      } else if (name == "--transport") {
        // The config table's own check, so the accepted names cannot drift apart.
        Config probe;
        Status s = probe.set("EAGERCOMM_TRANSPORT", *value);
        if (!s.ok()) {
          exit_code = usage_error("--transport: " + s.message());
          return std::nullopt;
        }
        o.transport = probe.transport;
      } else {
        Result<nanoseconds> d = parse_duration(*value);
        if (!d.ok()) {
          exit_code = usage_error(std::string(name) + ": " + d.status().message());
          return std::nullopt;
        }
        (name == "--timeout" ? o.timeout : o.stop_delay) = *d;
      }
      break;
    }
    if (!matched) {
      exit_code = usage_error("unknown option '" + std::string(arg) + "'");
      return std::nullopt;
    }
  }
  if (!have_n) {
    exit_code = usage_error("-n N (the number of ranks) is required");
    return std::nullopt;
  }
  if (i >= argc) {
    exit_code = usage_error("no program to run");
    return std::nullopt;
  }
  o.argv.assign(argv + i, argv + argc);
  return o;
}

// ---- small RAII helpers ----

struct Pipe {
  UniqueFd read, write;
};

std::optional<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// ---- program lookup, randomness, ports ----

// The path execve() will run: `prog` itself when it has a '/', else the first match in PATH.
// The error is the whole user-facing message.
Result<std::string> resolve_program(const std::string& prog) {
  // Empty when `path` can be run, else why not; `absent` tells "no such file" apart.
  const auto why_not = [](const std::string& path, bool& absent) -> std::string {
    struct stat st;
    absent = false;
    if (::stat(path.c_str(), &st) != 0) {
      absent = errno == ENOENT || errno == ENOTDIR;
      return strerror(errno);
    }
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    if (::access(path.c_str(), X_OK) != 0) return "not executable";
    return {};
  };
  bool absent = false;
  if (prog.find('/') != std::string::npos) {
    const std::string why = why_not(prog, absent);
    if (why.empty()) return prog;
    return Status(StatusCode::kInvalidArgument, "cannot run '" + prog + "': " + why);
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::string unusable;  // the first match that exists but cannot run, for the message
  for (size_t pos = 0; pos <= path.size();) {
    const size_t colon = std::min(path.find(':', pos), path.size());
    std::string dir = path.substr(pos, colon - pos);
    pos = colon + 1;
    if (dir.empty()) dir = ".";  // an empty PATH entry means the current directory
    const std::string candidate = dir + "/" + prog;
    const std::string why = why_not(candidate, absent);
    if (why.empty()) return candidate;
    if (!absent && unusable.empty()) unusable = candidate + ": " + why;
  }
  if (!unusable.empty()) {
    return Status(StatusCode::kInvalidArgument, "cannot run '" + prog + "': " + unusable);
  }
  return Status(StatusCode::kInvalidArgument, "'" + prog + "': command not found in PATH");
}

Result<std::string> random_hex(size_t bytes) {
  UniqueFd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return make_status(StatusCode::kIoError, "cannot open /dev/urandom: %s", strerror(errno));
  }
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(fd.get(), raw.data() + got, bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_status(StatusCode::kIoError, "cannot read /dev/urandom: %s",
                         n < 0 ? strerror(errno) : "end of file");
    }
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// A port nobody listens on right now (for torch's own store; ours is taken by our server).
Result<uint16_t> free_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return make_status(StatusCode::kIoError, "cannot find a free port: %s", strerror(errno));
  }
  return ntohs(addr.sin_port);
}

std::string signal_text(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  std::string out = "signal " + std::to_string(sig);
  if (abbrev != nullptr) out += std::string(" (SIG") + abbrev + ")";
  return out;
}

// Removes /dev/shm/eagercomm-<job>-*; returns how many.
int remove_job_segments(const std::string& job_id) {
  const std::string prefix = "eagercomm-" + job_id + "-";
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (std::string_view(e->d_name).starts_with(prefix) &&
        ::unlinkat(::dirfd(dir), e->d_name, 0) == 0) {
      ++removed;
    }
  }
  ::closedir(dir);
  return removed;
}

// ---- the ranks ----

// One output pipe of one rank, cut into prefixed lines.
class OutputStream {
 public:
  OutputStream(UniqueFd fd, int dest, std::string prefix)
      : fd_(std::move(fd)), dest_(dest), prefix_(std::move(prefix)) {}
  int fd() const { return fd_.get(); }
  bool open() const { return fd_.valid(); }

  // Reads what is there; closes (flushing a partial last line) at end of file.
  void on_readable() {
    char buf[65536];
    const ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      close();
      return;
    }
    pending_.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (;;) {
      const size_t nl = pending_.find('\n', start);
      if (nl == std::string::npos) break;
      emit(std::string_view(pending_).substr(start, nl - start));
      start = nl + 1;
    }
    pending_.erase(0, start);
    while (pending_.size() >= kMaxLineBytes) {
      emit(std::string_view(pending_).substr(0, kMaxLineBytes));
      pending_.erase(0, kMaxLineBytes);
    }
  }

  void close() {
    if (!pending_.empty()) emit(pending_);
    pending_.clear();
    fd_.reset();
  }

 private:
  // One write per line, so lines of different ranks never interleave.
  void emit(std::string_view line) {
    std::string out;
    out.reserve(prefix_.size() + line.size() + 1);
    out += prefix_;
    out += line;
    out += '\n';
    write_fully(dest_, out.data(), out.size());
  }

  UniqueFd fd_;
  int dest_;
  std::string prefix_;
  std::string pending_;
};

struct Rank {
  int index = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  std::vector<OutputStream> streams;
};

// Everything prepared before fork(): the child may only make async-signal-safe calls (the
// store server's thread is running), so no allocation happens after fork.
struct Exec {
  std::string path;
  std::vector<std::string> argv_storage;
  std::vector<std::vector<std::string>> env_storage;  // per rank
  std::vector<char*> argv;
};

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class Launcher {
 public:
  Launcher(Options options, std::string job_id, sigset_t child_mask)
      : o_(std::move(options)), job_id_(std::move(job_id)), child_mask_(child_mask) {}

  // Stops and reaps whatever is still running (an early return must not leave ranks behind).
  ~Launcher() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      ::kill(-r.pid, SIGKILL);
      ::waitpid(r.pid, nullptr, 0);
    }
  }

  // Starts every rank; false when one could not be started (the job is then stopping).
  bool start(const Exec& exec, const std::vector<std::vector<char*>>& envs) {
    const bool stdin_to_rank0 = !::isatty(STDIN_FILENO);
    for (int r = 0; r < o_.ranks; ++r) {
      if (!start_rank(r, exec, envs[r], r == 0 && stdin_to_rank0)) return false;
    }
    return true;
  }

  // Runs until every rank is gone and its output printed; returns the launcher's exit code.
  int run(int signal_fd) {
    if (o_.timeout > nanoseconds::zero()) job_deadline_ = Clock::now() + o_.timeout;
    std::vector<pollfd> fds;
    std::vector<OutputStream*> streams;
    for (;;) {
      const bool live =
          std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
      if (!live && !drain_deadline_) drain_deadline_ = Clock::now() + kDrain;
      fds.clear();
      streams.clear();
      fds.push_back({signal_fd, POLLIN, 0});
      for (Rank& r : ranks_) {
        for (OutputStream& s : r.streams) {
          if (!s.open()) continue;
          fds.push_back({s.fd(), POLLIN, 0});
          streams.push_back(&s);
        }
      }
      if (!live && streams.empty()) break;
      const Clock::time_point now = Clock::now();
      if (drain_deadline_ && now >= *drain_deadline_) {
        for (OutputStream* s : streams) s->close();
        break;
      }
      if (job_deadline_ && !stopping_ && now >= *job_deadline_) {
        std::fprintf(stderr, "eagercomm-run: job %s timed out after %s; stopping the ranks\n",
                     job_id_.c_str(), format_duration(o_.timeout).c_str());
        timed_out_ = true;
        stop();
      }
      if (stop_deadline_ && !stopping_ && now >= *stop_deadline_) {
        std::fprintf(stderr,
                     "eagercomm-run: ranks still running %s after the failure; stopping "
                     "them\n",
                     format_duration(o_.stop_delay).c_str());
        stop();
      }
      if (kill_deadline_ && now >= *kill_deadline_) {
        signal_all(SIGKILL);
        kill_deadline_.reset();
      }
      const int n = ::poll(fds.data(), fds.size(), poll_timeout());
      if (n < 0 && errno != EINTR) {
        std::fprintf(stderr, "eagercomm-run: poll failed: %s\n", strerror(errno));
        signal_all(SIGKILL);
        reap_blocking();
        return 1;
      }
      if (n <= 0) continue;
      if (fds[0].revents & POLLIN) on_signals(signal_fd);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) streams[i - 1]->on_readable();
      }
    }
    if (timed_out_) return kExitTimeout;
    if (failure_code_) return *failure_code_;
    if (forwarded_signal_ != 0) return 128 + forwarded_signal_;
    return 0;
  }

 private:
  bool start_rank(int index, const Exec& exec, const std::vector<char*>& env, bool take_stdin) {
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
      ::execve(exec.path.c_str(), exec.argv.data(), env.data());
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
      rank.streams.emplace_back(std::move(out->read), STDOUT_FILENO, prefix);
      rank.streams.emplace_back(std::move(err->read), STDERR_FILENO, prefix);
    }
    ranks_.push_back(std::move(rank));
    // The exec error pipe closes on a successful exec; otherwise it carries errno.
    exec_error->write.reset();
    int e = 0;
    ssize_t n;
    do {
      n = ::read(exec_error->read.get(), &e, sizeof(e));
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof(e))) {
      std::fprintf(stderr, "eagercomm-run: rank %d: cannot execute '%s': %s\n", index,
                   exec.path.c_str(), strerror(e));
      failure_code_ = kExitNotFound;
      stop();
      return false;
    }
    return true;
  }

  bool start_failed(int index, const std::string& why) {
    std::fprintf(stderr, "eagercomm-run: cannot start rank %d: %s\n", index, why.c_str());
    failure_code_ = 1;
    stop();
    return false;
  }

  int poll_timeout() const {
    std::optional<Clock::time_point> next;
    const auto consider = [&](const std::optional<Clock::time_point>& t) {
      if (t && (!next || *t < *next)) next = t;
    };
    if (!stopping_) consider(job_deadline_);
    if (!stopping_) consider(stop_deadline_);
    consider(kill_deadline_);
    consider(drain_deadline_);
    if (!next) return -1;
    const auto left = *next - Clock::now();
    if (left <= nanoseconds::zero()) return 0;
    return static_cast<int>(
        std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), INT_MAX));
  }

  void signal_all(int sig) {
    for (const Rank& r : ranks_) {
      if (r.running) ::kill(-r.pid, sig);
    }
  }

  // Stops the job: SIGTERM now, SIGKILL after the grace period.
  void stop() {
    if (stopping_) return;
    stopping_ = true;
    signal_all(SIGTERM);
    kill_deadline_ = Clock::now() + kGrace;
  }

  void on_signals(int signal_fd) {
    signalfd_siginfo info;
    while (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
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

  // Reaps every rank that exited. While a rank is a zombie its process group id cannot be
  // reused, so that is the moment to kill what it left behind in its group.
  void reap() {
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      ::kill(-pid, SIGKILL);
      int status = 0;
      if (::waitpid(pid, &status, 0) != pid) return;
      for (Rank& r : ranks_) {
        if (r.pid == pid && r.running) {
          r.running = false;
          rank_exited(r, status);
        }
      }
    }
  }

  void reap_blocking() {
    for (Rank& r : ranks_) {
      if (r.running && ::waitpid(r.pid, nullptr, 0) == r.pid) r.running = false;
    }
  }

  void rank_exited(const Rank& r, int status) {
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    // A survivor can notice a killed peer (and exit with an error) before this launcher reaps
    // the killed rank: a death by signal reaped just after an error exit is the cause.
    if (!ok && failure_code_ && !failure_by_signal_ && WIFSIGNALED(status) && !stopping_ &&
        Clock::now() - failure_at_ < kCauseWindow) {
      failure_code_ = 128 + WTERMSIG(status);
      failure_by_signal_ = true;
      std::fprintf(stderr,
                   "eagercomm-run: rank %d (pid %d) was killed by %s (the failure's cause)\n",
                   r.index, static_cast<int>(r.pid), signal_text(WTERMSIG(status)).c_str());
      return;
    }
    // Ranks ending because the job is being stopped (timeout, signal, another rank's failure)
    // are not failures of their own.
    if (ok || failure_code_ || stopping_) return;
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
                 how.c_str(), others && !stopping_ ? "; stopping the other ranks" : "");
    // The others get a moment to see the failure themselves (a collective with the failed rank
    // returns an error naming it), then they are stopped.
    if (o_.stop_delay > nanoseconds::zero()) {
      stop_deadline_ = Clock::now() + o_.stop_delay;
    } else {
      stop();
    }
  }

  Options o_;
  std::string job_id_;
  sigset_t child_mask_;
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  bool timed_out_ = false;
  int signals_received_ = 0;
  int forwarded_signal_ = 0;
  std::optional<int> failure_code_;
  Clock::time_point failure_at_;
  bool failure_by_signal_ = false;
  static constexpr auto kCauseWindow = std::chrono::milliseconds(500);
  std::optional<Clock::time_point> job_deadline_, stop_deadline_, kill_deadline_, drain_deadline_;
};

// The environment of rank `r`: ours minus the variables we set, then those.
std::vector<std::string> rank_environment(const Options& o, int r, uint16_t store_port,
                                          uint16_t torch_port, const std::string& job_id,
                                          const std::string& token) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"EAGERCOMM_RANK", std::to_string(r)},
      {"EAGERCOMM_SIZE", std::to_string(o.ranks)},
      {"EAGERCOMM_LOCAL_RANK", std::to_string(r)},
      {"EAGERCOMM_LOCAL_SIZE", std::to_string(o.ranks)},
      {"EAGERCOMM_MASTER_ADDR", "127.0.0.1"},
      {"EAGERCOMM_MASTER_PORT", std::to_string(store_port)},
      {"EAGERCOMM_JOB_ID", job_id},
      {"EAGERCOMM_JOB_TOKEN", token},
      {"RANK", std::to_string(r)},
      {"LOCAL_RANK", std::to_string(r)},
      {"WORLD_SIZE", std::to_string(o.ranks)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.ranks)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(torch_port)},
  };
  if (!o.transport.empty()) set.emplace_back("EAGERCOMM_TRANSPORT", o.transport);
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

int run_main(int argc, char** argv) {
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
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher and orphan the job
  UniqueFd signal_fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd.valid()) {
    std::fprintf(stderr, "eagercomm-run: signalfd failed: %s\n", strerror(errno));
    return 1;
  }

  Result<std::string> token = random_hex(16);
  Result<std::string> job_hex = random_hex(6);
  if (!token.ok() || !job_hex.ok()) {
    std::fprintf(stderr, "eagercomm-run: %s\n",
                 (token.ok() ? job_hex.status() : token.status()).message().c_str());
    return 1;
  }
  const std::string job_id = "run-" + *job_hex;
  auto server = TcpStoreServer::start("127.0.0.1", 0, *token);
  if (!server.ok()) {
    std::fprintf(stderr, "eagercomm-run: cannot start the job's store: %s\n",
                 server.status().message().c_str());
    return 1;
  }
  Result<uint16_t> torch_port = free_port();
  if (!torch_port.ok()) {
    std::fprintf(stderr, "eagercomm-run: %s\n", torch_port.status().message().c_str());
    return 1;
  }

  Exec exec;
  exec.path = *path;
  exec.argv_storage = options->argv;
  exec.argv = pointers(exec.argv_storage);
  std::vector<std::vector<char*>> envs;
  for (int r = 0; r < options->ranks; ++r) {
    exec.env_storage.push_back(
        rank_environment(*options, r, server.value()->port(), *torch_port, job_id, *token));
  }
  for (auto& env : exec.env_storage) envs.push_back(pointers(env));

  int code = 0;
  {
    Launcher launcher(*options, job_id, old_mask);
    launcher.start(exec, envs);
    code = launcher.run(signal_fd.get());
  }
  if (const int removed = remove_job_segments(job_id); removed > 0) {
    std::fprintf(stderr, "eagercomm-run: removed %d leftover shared-memory segment(s) of job %s\n",
                 removed, job_id.c_str());
  }
  return code;
}

}  // namespace
}  // namespace eagercomm

int main(int argc, char** argv) { return eagercomm::run_main(argc, argv); }
