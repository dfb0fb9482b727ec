// eagercomm-run's command line: the options, the exit codes, the parser.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace eagercomm::run {

// Exit codes of the launcher itself (a rank's own code is passed on otherwise).
inline constexpr int kExitFailure = 1;  // the launcher failed, or a rank left before joining
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitNotFound = 127;
inline constexpr int kMaxRanks = 4096;

struct Options {
  int ranks = 0;
  std::string transport;                // empty: not given
  std::chrono::nanoseconds timeout{0};  // 0: none
  std::chrono::nanoseconds stop_delay = std::chrono::seconds(2);
  bool prefix = true;
  bool keep_going = false;  // a failed rank does not stop the others
  std::vector<std::string> argv;
};

// Parses the command line; nullopt with `exit_code` set when the launcher must exit now (after
// --help, or a usage error it has printed).
std::optional<Options> parse_options(int argc, char** argv, int& exit_code);

}  // namespace eagercomm::run
