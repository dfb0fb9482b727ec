// eagercomm-run's rank output: each rank's stdout and stderr cut into lines and printed with a
// "[rank] " prefix, one write per line (lines of different ranks never interleave), and the
// eagercomm log lines that many ranks repeat word for word counted instead of printed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/unique_fd.h"

namespace eagercomm::run {

// Holds back repeats of one eagercomm log message. A job of a thousand ranks that all hit the
// same condition would otherwise print a thousand identical warnings (differing only in the
// logger's host:pid:tid and rank fields) and bury the line that says what went wrong. The first
// kShown of each message are printed; report() then says how many more there were. Only lines
// in the logger's format (runtime/log.h) are held back: a program's own output is never dropped.
class RepeatFilter {
 public:
  static constexpr uint64_t kShown = 3;
  // Distinct messages tracked; lines beyond are printed, so memory stays bounded.
  static constexpr size_t kMaxTracked = 4096;

  explicit RepeatFilter(int ranks) : ranks_(ranks) {}
  // Whether to print `line` (without its prefix) from rank `rank`.
  bool admit(int rank, std::string_view line);
  // "eagercomm-run: ... 997 more like this from 997 ranks: WARN boot: ..." for each message that
  // was held back, in the order they first appeared.
  void report(int dest) const;

 private:
  struct Seen {
    size_t order = 0;
    uint64_t count = 0;
    std::vector<bool> held_ranks;  // ranks whose copies were held back
    int held_rank_count = 0;
  };
  int ranks_;
  std::unordered_map<std::string, Seen> seen_;
};

// The message of an eagercomm log line ("WARN boot: store ..."), without the fields that tell
// processes apart ("<host>:<pid>:<tid> [<rank>] "); empty when `line` is not one.
std::string_view log_message(std::string_view line);

// One output pipe of one rank, cut into prefixed lines.
class OutputStream {
 public:
  // A line longer than this is printed in pieces, each with the prefix.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  OutputStream(UniqueFd fd, int dest, int rank, std::string prefix, RepeatFilter* repeats)
      : fd_(std::move(fd)),
        dest_(dest),
        rank_(rank),
        prefix_(std::move(prefix)),
        repeats_(repeats) {}
  int fd() const { return fd_.get(); }
  bool open() const { return fd_.valid(); }
  // Reads what is there; closes (flushing a partial last line) at end of file.
  void on_readable();
  void close();

 private:
  void emit(std::string_view line);

  UniqueFd fd_;
  int dest_;
  int rank_;
  std::string prefix_;
  RepeatFilter* repeats_;  // may be null
  std::string pending_;
};

}  // namespace eagercomm::run
