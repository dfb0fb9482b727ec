// Ranks as processes: run_process_world forks one child per rank, runs the body there and reports
// how each rank ended, by rank: its exit status, the signal that killed it, or that it was still
// running at the deadline (then it is killed). A child may send bytes back to the parent
// (report_to_parent). Inside a child GoogleTest's assertions count as usual (the child exits 1
// when the body added a failure); CHILD_CHECK / CHILD_OK / CHILD_VALUE end the child at once.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace eagercomm::test {

// The rank a child runs as, for its failure messages (-1 in the parent).
inline int g_rank = -1;
// The child's end of its report pipe (-1 in the parent).
inline int g_report_fd = -1;

struct ProcessWorldOptions {
  // The whole world's time; a rank still running then is killed and reported as hung.
  std::chrono::seconds timeout{120};
  // Once one rank failed the others would only wait for it: kill them.
  bool stop_all_on_failure = true;
  // Added to every failure message (which variant of a test failed).
  std::string label;
};

// How one rank ended.
struct RankExit {
  bool ok = false;     // exited 0 before the deadline
  std::string report;  // the bytes it passed to report_to_parent
};

// In a child: bytes for the parent, appended to the rank's RankExit::report.
inline bool report_to_parent(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(g_report_fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace process_world_detail {

// Failures the current test has recorded so far (a forked child inherits its parent's).
inline int failures_so_far() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return 0;
  const ::testing::TestResult* result = info->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) {
    failed += result->GetTestPartResult(i).failed() ? 1 : 0;
  }
  return failed;
}

inline void drain(int fd, std::string& into) {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
    } else if (!(n < 0 && errno == EINTR)) {
      return;  // EOF or EAGAIN
    }
  }
}

inline std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "died of signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace process_world_detail

// Forks `size` children; child r sets g_rank = r, runs body(r) and exits 0 unless body added a
// GoogleTest failure. Returns each rank's ending; every rank that did not end well is a test
// failure naming it (see its stderr above for why).
inline std::vector<RankExit> run_process_world(int size, const std::function<void(int rank)>& body,
                                               const ProcessWorldOptions& options = {}) {
  namespace d = process_world_detail;
  using Clock = std::chrono::steady_clock;
  const std::string label = options.label.empty() ? "" : " (" + options.label + ")";
  std::vector<RankExit> exits(size);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  const int failures_before = d::failures_so_far();
  fflush(stdout);  // else a child would print the parent's buffered output again
  fflush(stderr);
  for (int r = 0; r < size; ++r) {
    int fds[2];
    if (pipe(fds) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      break;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (int fd : pipes) close(fd);
      // A backstop for a parent that died: the parent itself kills a child at the deadline.
      alarm(static_cast<unsigned>(options.timeout.count() + 30));
      g_rank = r;
      g_report_fd = fds[1];
      body(r);
      fflush(stdout);
      fflush(stderr);
      _exit(d::failures_so_far() > failures_before ? 1 : 0);
    }
    close(fds[1]);
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      close(fds[0]);
      break;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  const auto deadline = Clock::now() + options.timeout;
  std::vector<bool> reaped(pids.size(), false);
  size_t running = pids.size();
  bool failed = pids.size() != static_cast<size_t>(size);
  while (running > 0) {
    bool any = false;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (reaped[r]) continue;
      d::drain(pipes[r], exits[r].report);
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      d::drain(pipes[r], exits[r].report);
      reaped[r] = true;
      --running;
      any = true;
      exits[r].ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!exits[r].ok) {
        ADD_FAILURE() << "rank " << r << " " << d::describe(status) << label
                      << " (see its output above)";
        failed = true;
      }
    }
    const bool late = Clock::now() >= deadline;
    if (running > 0 && (late || (failed && options.stop_all_on_failure))) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (reaped[r]) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        reaped[r] = true;
        --running;
        if (late) {
          ADD_FAILURE() << "rank " << r << " still running after " << options.timeout.count()
                        << " s" << label << ": killed (hung?)";
        }
      }
    }
    if (!any && running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int fd : pipes) close(fd);
  return exits;
}

// True when every rank of a run_process_world ended well.
inline bool all_ok(const std::vector<RankExit>& exits) {
  for (const RankExit& e : exits) {
    if (!e.ok) return false;
  }
  return !exits.empty();
}

}  // namespace eagercomm::test

#define CHILD_CHECK(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", ::eagercomm::test::g_rank, __FILE__, \
              __LINE__, #cond);                                                                  \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fputc('\n', stderr);                                                                       \
      _exit(1);                                                                                  \
    }                                                                                            \
  } while (0)
#define CHILD_OK(expr)                                                        \
  do {                                                                        \
    const Status child_status_ = (expr);                                      \
    CHILD_CHECK(child_status_.ok(), "%s", child_status_.to_string().c_str()); \
  } while (0)
// Declares `lhs` as the value of the Result `expr`, or fails the child.
#define CHILD_VALUE(lhs, expr)                                                     \
  auto lhs##_result = (expr);                                                      \
  CHILD_CHECK(lhs##_result.ok(), "%s", lhs##_result.status().to_string().c_str()); \
  auto lhs = std::move(lhs##_result).value()
