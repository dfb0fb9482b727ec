// The logger. Each line is formatted on the stack and handed to the kernel in one write(2), so
// lines from concurrent threads and processes never interleave and the write path takes no
// lock and allocates nothing.
#include "runtime/log.h"
#include "runtime/unique_fd.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace eagercomm {

namespace log_detail {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
// Every bit, not kLogAllSubsys: a constant, so lines logged by other files' static
// initializers are never lost to a mask not yet set.
std::atomic<uint32_t> g_subsys_mask{~0u};
}  // namespace log_detail

namespace {

constexpr const char* kLevelNames[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

// A line at most PIPE_BUF long is written atomically even when the destination is a pipe (a
// launcher collecting stderr); longer messages are truncated and end in "...".
constexpr size_t kMaxLineBytes = PIPE_BUF;

// The destination every writer loads once per line. It only ever holds STDERR_FILENO or
// g_owned_fd, and neither is ever closed, so a writer holding a stale value still writes to a
// valid descriptor (the previous destination) rather than to a reused number.
std::atomic<int> g_fd{STDERR_FILENO};

// Serializes log_configure() (never the write path).
std::mutex g_configure_mutex;
// The descriptor the logger owns once a file was configured; later files are dup3()'d onto
// the same number, which atomically redirects writers. It stays open for the life of the
// process even after switching back to stderr: that is the one descriptor the logger keeps.
int g_owned_fd = -1;  // guarded by g_configure_mutex

thread_local int t_rank = -1;

const char* host_name() {
  static const std::array<char, 256> name = [] {
    std::array<char, 256> out{};
    if (gethostname(out.data(), out.size() - 1) != 0) std::strcpy(out.data(), "unknown");
    out.back() = '\0';
    return out;
  }();
  return name.data();
}

long current_tid() { return static_cast<long>(syscall(SYS_gettid)); }

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Index of a subsystem name (case-insensitive), -1 when there is none.
int subsys_index(std::string_view name) {
  for (int i = 0; i < kLogSubsysCount; ++i) {
    if (iequals(name, log_detail::kSubsysNames[i])) return i;
  }
  return -1;
}

}  // namespace

const char* log_subsys_name(LogSubsys s) {
  const auto i = static_cast<int>(s);
  return i < kLogSubsysCount ? log_detail::kSubsysNames[i] : "unknown";
}

const char* log_level_name(LogLevel l) {
  const auto i = static_cast<size_t>(l);
  return i < std::size(kLevelNames) ? kLevelNames[i] : "UNKNOWN";
}

namespace log_detail {

void write(LogLevel level, LogSubsys subsys, const char* /*file*/, int /*line*/, const char* fmt,
           ...) {
  const int saved_errno = errno;  // callers log and then inspect errno
  char line[kMaxLineBytes];
  char rank[16] = "-";
  if (const int r = t_rank; r >= 0) std::snprintf(rank, sizeof(rank), "%d", r);

  // At most sizeof(line) - 1 bytes of text: the last byte is for the newline, which replaces
  // the NUL that snprintf writes.
  int n = std::snprintf(line, sizeof(line), "%s:%d:%ld [%s] %s %s: ", host_name(),
                        static_cast<int>(getpid()), current_tid(), rank, log_level_name(level),
                        log_subsys_name(subsys));
  size_t len = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof(line) - 1);

  va_list ap;
  va_start(ap, fmt);
  n = std::vsnprintf(line + len, sizeof(line) - len, fmt, ap);
  va_end(ap);
  if (n >= 0 && static_cast<size_t>(n) < sizeof(line) - len) {
    len += static_cast<size_t>(n);
    while (len > 0 && line[len - 1] == '\n') --len;  // the line gets exactly one newline
  } else if (n >= 0) {
    len = sizeof(line) - 1;  // vsnprintf kept all but the last byte, which holds its NUL
    std::memcpy(line + len - 3, "...", 3);
  }
  line[len++] = '\n';
  write_fully(g_fd.load(std::memory_order_acquire), line, len);
  errno = saved_errno;
}

}  // namespace log_detail

Result<uint32_t> log_parse_subsys(std::string_view list) {
  list = trim_blanks(list);
  const bool all_but = !list.empty() && list.front() == '^';
  if (all_but) list.remove_prefix(1);
  uint32_t mask = 0;
  std::string unknown;
  size_t unknown_count = 0;
  bool empty_name = false;
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    const std::string_view name = trim_blanks(list.substr(start, comma - start));
    if (name.empty()) {
      empty_name = true;
    } else if (iequals(name, "all")) {
      mask = kLogAllSubsys;
    } else if (const int i = subsys_index(name); i >= 0) {
      mask |= 1u << i;
    } else {
      unknown += unknown.empty() ? "'" : ", '";
      unknown += name;
      unknown += "'";
      ++unknown_count;
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (unknown_count != 0 || empty_name) {
    std::string message = unknown_count == 0   ? std::string("empty subsystem name")
                          : unknown_count == 1 ? "unknown subsystem " + unknown
                                               : "unknown subsystems " + unknown;
    message += " (accepted: all";
    for (int i = 0; i < kLogSubsysCount; ++i) {
      message += ", ";
      message += log_detail::kSubsysNames[i];
    }
    message += "; a leading ^ selects all but the listed ones)";
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  return all_but ? kLogAllSubsys & ~mask : mask;
}

Status log_configure(const RuntimeConfig& config) {
  Result<uint32_t> mask = log_parse_subsys(config.log_subsys);
  if (!mask.ok()) {
    return Status(StatusCode::kInvalidArgument,
                  "EAGERCOMM_LOG_SUBSYS='" + config.log_subsys + "': " + mask.status().message());
  }
  if (config.log_level > LogLevel::kTrace) {
    return make_status(StatusCode::kInvalidArgument, "log level %d is not a level",
                       static_cast<int>(config.log_level));
  }

  std::lock_guard<std::mutex> lock(g_configure_mutex);
  int fd = STDERR_FILENO;
  if (!config.log_file.empty()) {
    const std::string path = log_expand_path(config.log_file);
    const int opened = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (opened < 0) {
      return make_status(StatusCode::kIoError,
                         "cannot open log file %s (EAGERCOMM_LOG_FILE=%s): %s", path.c_str(),
                         config.log_file.c_str(), std::strerror(errno));
    }
    if (g_owned_fd < 0) {
      g_owned_fd = opened;
    } else {
      // dup3 replaces the file behind g_owned_fd in one step: a concurrent writer's line goes
      // wholly to the old file or wholly to the new one, never to a closed descriptor.
      const int rc = ::dup3(opened, g_owned_fd, O_CLOEXEC);
      const int dup_errno = errno;
      ::close(opened);
      if (rc < 0) {
        return make_status(StatusCode::kIoError, "cannot switch the log to %s: %s", path.c_str(),
                           std::strerror(dup_errno));
      }
    }
    fd = g_owned_fd;
  }
  g_fd.store(fd, std::memory_order_release);
  log_detail::g_level.store(static_cast<int>(config.log_level), std::memory_order_relaxed);
  log_detail::g_subsys_mask.store(*mask, std::memory_order_relaxed);
  return Status::Ok();
}

void log_set_thread_rank(int rank) { t_rank = rank; }

int log_thread_rank() { return t_rank; }

std::string log_expand_path(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    switch (pattern[++i]) {
      case 'h':
        out += host_name();
        break;
      case 'p':
        out += std::to_string(getpid());
        break;
      case '%':
        out += '%';
        break;
      default:  // not ours: keep it as written
        out += '%';
        out += pattern[i];
    }
  }
  return out;
}

}  // namespace eagercomm
