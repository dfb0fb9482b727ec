#include "runtime/log.h"
#include "bench/bench_log.h"
#include "collectives/config.h"
#include "sgd/sgd_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace eagercomm {
namespace {

std::string host_name() {
  char name[256] = {};
  EXPECT_EQ(gethostname(name, sizeof(name) - 1), 0);
  return name;
}

long tid() { return static_cast<long>(syscall(SYS_gettid)); }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The lines of `text`; the text must end in a newline (the logger never leaves half a line).
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  EXPECT_EQ(start, text.size()) << "text does not end in a newline";
  return lines;
}

// One log line taken apart: "<host>:<pid>:<tid> [<rank>] <LEVEL> <subsys>: <message>".
struct LogLine {
  std::string host;
  long pid = 0;
  long tid = 0;
  std::string rank;
  std::string level;
  std::string subsys;
  std::string message;
};

bool parse_line(const std::string& line, LogLine& out) {
  const size_t colon1 = line.find(':');
  const size_t colon2 = line.find(':', colon1 + 1);
  const size_t open = line.find(" [", colon2);
  const size_t close = line.find("] ", open);
  const size_t level_end = line.find(' ', close + 2);
  const size_t subsys_end = line.find(": ", level_end);
  if (colon1 == 0 || subsys_end == std::string::npos) return false;
  char* end = nullptr;
  out.host = line.substr(0, colon1);
  out.pid = std::strtol(line.c_str() + colon1 + 1, &end, 10);
  if (end != line.c_str() + colon2) return false;
  out.tid = std::strtol(line.c_str() + colon2 + 1, &end, 10);
  if (end != line.c_str() + open) return false;
  out.rank = line.substr(open + 2, close - open - 2);
  out.level = line.substr(close + 2, level_end - close - 2);
  out.subsys = line.substr(level_end + 1, subsys_end - level_end - 1);
  out.message = line.substr(subsys_end + 2);
  return true;
}

// The message the writer threads below log as line `index` of writer `writer`.
std::string writer_payload(int writer, int index) {
  return std::string(static_cast<size_t>((index * 37 + writer * 11) % 700),
                     static_cast<char>('a' + writer));
}

// Takes apart "writer <w> line <i> len <n> <payload> end", checking the payload in full.
bool parse_writer_message(const std::string& message, int& writer, int& index) {
  size_t len = 0;
  int consumed = 0;
  if (std::sscanf(message.c_str(), "writer %d line %d len %zu%n", &writer, &index, &len,
                  &consumed) != 3) {
    return false;
  }
  if (writer < 0 || writer >= 26 || index < 0) return false;
  const std::string payload = writer_payload(writer, index);
  return payload.size() == len &&
         message.substr(static_cast<size_t>(consumed)) == " " + payload + " end";
}

// Each test logs to its own file in a fresh directory and leaves the logger at its defaults.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/log_test_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override {
    EXPECT_TRUE(log_configure(Config{}).ok());
    log_set_thread_rank(-1);
    ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0);
  }

  // Configures the logger from EAGERCOMM_* variables, writing to `file` in the test directory.
  std::string configure(std::map<std::string, std::string> env, const std::string& file = "log") {
    env["EAGERCOMM_LOG_FILE"] = dir_ + "/" + file;
    Result<Config> config = Config::load(env);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (!config.ok()) return {};
    const Status status = log_configure(*config);
    EXPECT_TRUE(status.ok()) << status.to_string();
    return dir_ + "/" + file;
  }

  std::string dir_;
};

TEST_F(LogTest, DefaultsAreWarnAllSubsystems) {
  // Every test leaves the logger at the defaults, so this holds in any test order.
  for (int s = 0; s < kLogSubsysCount; ++s) {
    const auto subsys = static_cast<LogSubsys>(s);
    EXPECT_TRUE(log_enabled(LogLevel::kError, subsys));
    EXPECT_TRUE(log_enabled(LogLevel::kWarn, subsys));
    EXPECT_FALSE(log_enabled(LogLevel::kInfo, subsys));
    EXPECT_FALSE(log_enabled(LogLevel::kTrace, subsys));
  }
  EXPECT_EQ(log_thread_rank(), -1);
}

TEST_F(LogTest, DefaultDestinationIsStderr) {
  const std::string path = dir_ + "/stderr";
  const int file = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(file, 0);
  const int saved = dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(dup2(file, STDERR_FILENO), STDERR_FILENO);
  EC_WARN(kMem, "to stderr");
  EC_INFO(kMem, "filtered");
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(file);
  const std::vector<std::string> lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" [-] WARN mem: to stderr"), std::string::npos) << lines[0];
}

TEST_F(LogTest, LineFormatAndPidExpansion) {
  configure({{"EAGERCOMM_LOG_LEVEL", "info"}}, "log.%p");
  log_set_thread_rank(3);
  EXPECT_EQ(log_thread_rank(), 3);
  EC_WARN(kNet, "hello %d from %s", 42, "rank");
  log_set_thread_rank(-1);
  EC_INFO(kColl, "second\n");  // a trailing newline is not doubled

  const std::string path = dir_ + "/log." + std::to_string(getpid());
  const std::vector<std::string> lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 2u) << "in " << path;
  const std::string who =
      host_name() + ":" + std::to_string(getpid()) + ":" + std::to_string(tid());
  EXPECT_EQ(lines[0], who + " [3] WARN net: hello 42 from rank");
  EXPECT_EQ(lines[1], who + " [-] INFO coll: second");
  LogLine parsed;
  ASSERT_TRUE(parse_line(lines[0], parsed));
  EXPECT_EQ(parsed.host, host_name());
  EXPECT_EQ(parsed.pid, static_cast<long>(getpid()));
  EXPECT_EQ(parsed.tid, tid());
  EXPECT_EQ(parsed.rank, "3");
  EXPECT_EQ(parsed.level, "WARN");
  EXPECT_EQ(parsed.subsys, "net");
  EXPECT_EQ(parsed.message, "hello 42 from rank");
}

TEST_F(LogTest, LevelFiltering) {
  const std::string path = configure({{"EAGERCOMM_LOG_LEVEL", "info"}});
  EXPECT_TRUE(log_enabled(LogLevel::kInfo, log_subsys::kSgd));
  EXPECT_FALSE(log_enabled(LogLevel::kDebug, log_subsys::kSgd));
  EC_TRACE(kSgd, "trace");
  EC_DEBUG(kSgd, "debug");
  EC_INFO(kSgd, "info");
  EC_WARN(kSgd, "warn");
  EC_ERROR(kSgd, "error");
  std::vector<std::string> lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(" INFO sgd: info"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" WARN sgd: warn"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(" ERROR sgd: error"), std::string::npos) << lines[2];

  configure({{"EAGERCOMM_LOG_LEVEL", "error"}}, "error-only");
  EC_WARN(kSgd, "warn");
  EC_ERROR(kSgd, "error");
  lines = split_lines(read_file(dir_ + "/error-only"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" ERROR sgd: error"), std::string::npos) << lines[0];

  configure({{"EAGERCOMM_LOG_LEVEL", "trace"}}, "all");
  EC_TRACE(kSgd, "trace");
  EC_DEBUG(kSgd, "debug");
  lines = split_lines(read_file(dir_ + "/all"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" TRACE sgd: trace"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" DEBUG sgd: debug"), std::string::npos) << lines[1];
}

TEST_F(LogTest, DisabledLinesDoNotEvaluateArguments) {
  configure({{"EAGERCOMM_LOG_LEVEL", "warn"}, {"EAGERCOMM_LOG_SUBSYS", "net"}});
  int evaluated = 0;
  EC_DEBUG(kNet, "%d", ++evaluated);
  EC_WARN(kColl, "%d", ++evaluated);
  EXPECT_EQ(evaluated, 0);
  EC_WARN(kNet, "%d", ++evaluated);
  EXPECT_EQ(evaluated, 1);
}

TEST_F(LogTest, SubsystemFiltering) {
  const std::string path = configure({{"EAGERCOMM_LOG_SUBSYS", "net,COLL"}});
  EXPECT_TRUE(log_enabled(LogLevel::kWarn, log_subsys::kNet));
  EXPECT_TRUE(log_enabled(LogLevel::kWarn, log_subsys::kColl));
  for (LogSubsys s : {log_subsys::kInit, log_subsys::kPartial, log_subsys::kSgd, log_subsys::kMem,
                      log_subsys::kEngine, log_subsys::kBoot, log_subsys::kBench}) {
    EXPECT_FALSE(log_enabled(LogLevel::kError, s)) << log_subsys_name(s);
  }
  EC_WARN(kNet, "a");
  EC_WARN(kMem, "b");
  EC_WARN(kColl, "c");
  std::vector<std::string> lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" WARN net: a"), std::string::npos);
  EXPECT_NE(lines[1].find(" WARN coll: c"), std::string::npos);

  const std::string all_but = configure({{"EAGERCOMM_LOG_SUBSYS", "^net"}}, "all-but-net");
  for (int s = 0; s < kLogSubsysCount; ++s) {
    const auto subsys = static_cast<LogSubsys>(s);
    EXPECT_EQ(log_enabled(LogLevel::kWarn, subsys), subsys != log_subsys::kNet)
        << log_subsys_name(subsys);
  }
  EC_WARN(kNet, "a");
  EC_WARN(kBench, "b");
  lines = split_lines(read_file(all_but));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" WARN bench: b"), std::string::npos);
}

TEST(LogParseSubsys, Lists) {
  const auto bit = [](LogSubsys s) { return 1u << static_cast<unsigned>(s); };
  const auto parse = [](std::string_view text) {
    Result<uint32_t> mask = log_parse_subsys(text);
    EXPECT_TRUE(mask.ok()) << text << ": " << mask.status().to_string();
    return mask.ok() ? *mask : 0xdeadu;
  };
  EXPECT_EQ(parse("all"), kLogAllSubsys);
  EXPECT_EQ(parse("ALL"), kLogAllSubsys);
  EXPECT_EQ(parse("net"), bit(log_subsys::kNet));
  EXPECT_EQ(parse(" net , coll "), bit(log_subsys::kNet) | bit(log_subsys::kColl));
  EXPECT_EQ(parse("bench,init"), bit(log_subsys::kBench) | bit(log_subsys::kInit));
  EXPECT_EQ(parse("^net,coll"), kLogAllSubsys & ~(bit(log_subsys::kNet) | bit(log_subsys::kColl)));
  EXPECT_EQ(parse("^all"), 0u);
  EXPECT_EQ(parse("net,all"), kLogAllSubsys);
  EXPECT_EQ(kLogAllSubsys, 0x1ffu);
}

TEST(LogParseSubsys, BadListsNameTheProblemAndTheChoices) {
  Result<uint32_t> mask = log_parse_subsys("foo,net,bar");
  ASSERT_FALSE(mask.ok());
  EXPECT_EQ(mask.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mask.status().message(),
            "unknown subsystems 'foo', 'bar' (accepted: all, init, net, coll, partial, sgd, mem, "
            "engine, boot, bench; a leading ^ selects all but the listed ones)");
  for (const char* bad : {"", " ", "^", "net,,coll", "net,", ",net", "^^net", "net coll"}) {
    EXPECT_FALSE(log_parse_subsys(bad).ok()) << "'" << bad << "'";
  }
  EXPECT_EQ(log_parse_subsys("net,").status().message().rfind("empty subsystem name", 0), 0u);
}

TEST_F(LogTest, BadSubsystemIsAnErrorAndChangesNothing) {
  configure({{"EAGERCOMM_LOG_LEVEL", "debug"}});
  Config config;
  config.log_subsys = "net,colll";  // bypasses load()'s check, as a program building one might
  const Status status = log_configure(config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().rfind("EAGERCOMM_LOG_SUBSYS='net,colll': unknown subsystem 'colll' "
                                   "(accepted: all, init, net, coll,",
                                   0),
            0u)
      << status.message();
  EXPECT_TRUE(log_enabled(LogLevel::kDebug, log_subsys::kMem));  // still the previous setting
}

TEST_F(LogTest, UnopenableFileIsAnErrorAndChangesNothing) {
  const std::string path = configure({{"EAGERCOMM_LOG_LEVEL", "info"}});
  Config config;
  config.log_level = LogLevel::kError;
  config.log_file = dir_ + "/no/such/dir/log";
  const Status status = log_configure(config);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find(config.log_file), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::strerror(ENOENT)), std::string::npos) << status.message();
  EXPECT_TRUE(log_enabled(LogLevel::kInfo, log_subsys::kNet));
  EC_INFO(kNet, "still here");
  EXPECT_EQ(split_lines(read_file(path)).size(), 1u);
}

TEST_F(LogTest, ReconfigureAppendsAndSwitchesFiles) {
  const std::string first = configure({}, "first");
  EC_WARN(kBoot, "one");
  const std::string second = configure({}, "second");
  EC_WARN(kBoot, "two");
  configure({}, "first");  // O_APPEND: the earlier line is kept
  EC_WARN(kBoot, "three");
  EXPECT_EQ(split_lines(read_file(first)).size(), 2u);
  EXPECT_EQ(split_lines(read_file(second)).size(), 1u);
}

TEST(LogExpandPath, Patterns) {
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(log_expand_path(""), "");
  EXPECT_EQ(log_expand_path("/tmp/plain.log"), "/tmp/plain.log");
  EXPECT_EQ(log_expand_path("%h-%p.log"), host_name() + "-" + pid + ".log");
  EXPECT_EQ(log_expand_path("100%%-%p"), "100%-" + pid);
  EXPECT_EQ(log_expand_path("%x%"), "%x%");  // not ours: kept as written
  EXPECT_EQ(log_expand_path("%%p"), "%p");
}

TEST(LogNames, LevelsAndSubsystems) {
  EXPECT_STREQ(log_level_name(LogLevel::kError), "ERROR");
  EXPECT_STREQ(log_level_name(LogLevel::kWarn), "WARN");
  EXPECT_STREQ(log_level_name(LogLevel::kInfo), "INFO");
  EXPECT_STREQ(log_level_name(LogLevel::kDebug), "DEBUG");
  EXPECT_STREQ(log_level_name(LogLevel::kTrace), "TRACE");
  const char* expected[] = {"init", "net",    "coll", "partial", "sgd",
                            "mem",  "engine", "boot", "bench"};
  for (int s = 0; s < kLogSubsysCount; ++s) {
    EXPECT_STREQ(log_subsys_name(static_cast<LogSubsys>(s)), expected[s]);
  }
  EXPECT_STREQ(log_subsys_name(static_cast<LogSubsys>(200)), "unknown");
}

TEST_F(LogTest, LongLinesAreTruncatedToOneAtomicWrite) {
  const std::string path = configure({});
  const std::string huge(3 * PIPE_BUF, 'x');
  EC_WARN(kMem, "%s", huge.c_str());
  EC_WARN(kMem, "after");
  const std::string text = read_file(path);
  const std::vector<std::string> lines = split_lines(text);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size() + 1, size_t{PIPE_BUF});
  EXPECT_EQ(lines[0].substr(lines[0].size() - 4), "x...");
  EXPECT_NE(lines[1].find(" WARN mem: after"), std::string::npos);
}

TEST_F(LogTest, ErrnoIsPreserved) {
  configure({});
  errno = EAGAIN;
  EC_WARN(kNet, "does not touch errno");
  EXPECT_EQ(errno, EAGAIN);
}

TEST(LogRank, IsPerThread) {
  log_set_thread_rank(5);
  int other = 0;
  std::thread([&other] { other = log_thread_rank(); }).join();
  EXPECT_EQ(other, -1);
  EXPECT_EQ(log_thread_rank(), 5);
  log_set_thread_rank(-1);
}

// A thread that acts for one rank for a while (destroying a communicator it did not create)
// prints that rank meanwhile and its own again after, nested scopes included.
TEST_F(LogTest, ScopedRankRestoresTheThreadsRank) {
  const std::string path = configure({});
  log_set_thread_rank(1);
  {
    ScopedLogRank outer(7);
    EC_WARN(kColl, "outer");
    {
      ScopedLogRank inner(-1);
      EC_WARN(kColl, "none");
    }
    EXPECT_EQ(log_thread_rank(), 7);
  }
  EXPECT_EQ(log_thread_rank(), 1);
  EC_WARN(kColl, "own");
  const std::vector<std::string> lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 3u);
  const char* expected[][2] = {{"7", "outer"}, {"-", "none"}, {"1", "own"}};
  for (size_t i = 0; i < lines.size(); ++i) {
    LogLine parsed;
    ASSERT_TRUE(parse_line(lines[i], parsed)) << lines[i];
    EXPECT_EQ(parsed.rank, expected[i][0]) << lines[i];
    EXPECT_EQ(parsed.message, expected[i][1]) << lines[i];
  }
}

// Checks that every line of `text` is one whole line written by the writer threads below, with
// the writer's rank, and that each writer's lines appear in the order it wrote them; counts them.
void check_writer_lines(const std::string& text, std::vector<int>& next_index) {
  for (const std::string& line : split_lines(text)) {
    LogLine parsed;
    int writer = -1;
    int index = -1;
    ASSERT_TRUE(parse_line(line, parsed)) << "mangled line: " << line;
    ASSERT_TRUE(parse_writer_message(parsed.message, writer, index)) << "mangled line: " << line;
    ASSERT_LT(writer, static_cast<int>(next_index.size())) << line;
    EXPECT_EQ(parsed.pid, static_cast<long>(getpid()));
    EXPECT_EQ(parsed.level, "INFO");
    EXPECT_EQ(parsed.subsys, "engine");
    EXPECT_EQ(parsed.rank, std::to_string(100 + writer)) << line;  // the writer's own rank
    EXPECT_EQ(index, next_index[writer]) << line;
    next_index[writer] = index + 1;
  }
}

void write_lines(int writer, int count, std::atomic<bool>& go) {
  log_set_thread_rank(100 + writer);
  while (!go.load()) std::this_thread::yield();
  for (int i = 0; i < count; ++i) {
    const std::string payload = writer_payload(writer, i);
    EC_INFO(kEngine, "writer %d line %d len %zu %s end", writer, i, payload.size(),
            payload.c_str());
  }
}

TEST_F(LogTest, ConcurrentLinesNeverInterleave) {
  constexpr int kWriters = 8;
  constexpr int kLines = 2000;
  const std::string path = configure({{"EAGERCOMM_LOG_LEVEL", "info"}});
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) threads.emplace_back(write_lines, w, kLines, std::ref(go));
  go = true;
  for (auto& t : threads) t.join();

  std::vector<int> next_index(kWriters, 0);
  check_writer_lines(read_file(path), next_index);
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(next_index[w], kLines) << "writer " << w;
}

TEST_F(LogTest, ReconfigureWhileWritingLosesAndTearsNothing) {
  constexpr int kWriters = 4;
  constexpr int kLines = 3000;
  configure({{"EAGERCOMM_LOG_LEVEL", "info"}}, "a");
  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([w, &go, &done] {
      write_lines(w, kLines, go);
      ++done;
    });
  }
  go = true;
  // Switch between two files until the writers finish (at least a few times either way).
  for (int i = 0; done.load() < kWriters || i < 4; ++i) {
    configure({{"EAGERCOMM_LOG_LEVEL", "info"}}, i % 2 == 0 ? "b" : "a");
    std::this_thread::yield();
  }
  for (auto& t : threads) t.join();

  // One thread's lines may be split between the files, so each file must hold whole lines in
  // each thread's order, and the two together every line.
  size_t total = 0;
  for (const char* file : {"a", "b"}) {
    std::vector<int> last_index(kWriters, -1);
    for (const std::string& line : split_lines(read_file(dir_ + "/" + file))) {
      LogLine parsed;
      int writer = -1;
      int index = -1;
      ASSERT_TRUE(parse_line(line, parsed)) << "mangled line: " << line;
      ASSERT_TRUE(parse_writer_message(parsed.message, writer, index)) << "mangled line: " << line;
      ASSERT_LT(writer, kWriters) << line;
      EXPECT_GT(index, last_index[writer]) << line;
      last_index[writer] = index;
      ++total;
    }
  }
  EXPECT_EQ(total, size_t{kWriters} * kLines);
}

}  // namespace
}  // namespace eagercomm
