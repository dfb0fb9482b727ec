#include "tools/run_support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "runtime/build_config.h"

extern char** environ;  // POSIX: the process environment, declared by no standard header.

namespace eagercomm::run {

std::optional<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

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
  // libucm (loaded with libucs, which libeagercomm links) patches mmap, munmap and madvise at
  // load time; under a sanitizer its hooks run inside the sanitizer's interceptors, and glibc's
  // madvise of a finished thread's stack then crashes the process (SIGSEGV in TSan's mutex
  // bookkeeping; ctest sets the same variables for sanitizer builds). A sanitizer build of the
  // launcher most likely starts ranks of the same build, so it turns the hooks off for them
  // unless the caller set the variables.
  std::vector<std::pair<std::string, std::string>> defaults;
  if (std::string_view(EAGERCOMM_SANITIZER) != "") {
    defaults = {{"UCX_MEM_EVENTS", "no"},
                {"UCX_MEM_MALLOC_HOOKS", "no"},
                {"UCX_MEM_MMAP_HOOK_MODE", "none"}};
  }
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  for (const auto& [name, value] : defaults) {
    if (std::getenv(name.c_str()) == nullptr) env.push_back(name + "=" + value);
  }
  return env;
}

}  // namespace eagercomm::run
