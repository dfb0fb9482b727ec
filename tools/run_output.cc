#include "tools/run_output.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace eagercomm::run {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string_view log_message(std::string_view line) {
  // "<host>:<pid>:<tid> [<rank>] <LEVEL> <subsys>: <message>" (runtime/log.cc).
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return {};
  const std::string_view who = line.substr(0, space);
  const size_t tid = who.rfind(':');
  if (tid == std::string_view::npos || tid == 0 || !all_digits(who.substr(tid + 1))) return {};
  const size_t pid = who.rfind(':', tid - 1);
  if (pid == std::string_view::npos || !all_digits(who.substr(pid + 1, tid - pid - 1))) return {};
  std::string_view rest = line.substr(space + 1);
  const size_t close = rest.find("] ");
  if (!rest.starts_with('[') || close == std::string_view::npos) return {};
  rest = rest.substr(close + 2);
  for (const char* level : {"ERROR ", "WARN ", "INFO ", "DEBUG ", "TRACE "}) {
    if (rest.starts_with(level)) return rest;
  }
  return {};
}

bool RepeatFilter::admit(int rank, std::string_view line) {
  const std::string_view message = log_message(line);
  if (message.empty()) return true;
  auto it = seen_.find(std::string(message));
  if (it == seen_.end()) {
    if (seen_.size() >= kMaxTracked) return true;
    it = seen_.emplace(std::string(message), Seen{}).first;
    it->second.order = seen_.size();
  }
  Seen& s = it->second;
  if (++s.count <= kShown) return true;
  if (s.held_ranks.empty()) s.held_ranks.resize(static_cast<size_t>(std::max(ranks_, 1)));
  if (rank >= 0 && rank < ranks_ && !s.held_ranks[rank]) {
    s.held_ranks[rank] = true;
    ++s.held_rank_count;
  }
  return false;
}

void RepeatFilter::report(int dest) const {
  std::vector<std::pair<size_t, const std::pair<const std::string, Seen>*>> held;
  for (const auto& entry : seen_) {
    if (entry.second.count > kShown) held.emplace_back(entry.second.order, &entry);
  }
  std::sort(held.begin(), held.end());
  for (const auto& [order, entry] : held) {
    const Seen& s = entry->second;
    char head[160];
    std::snprintf(head, sizeof(head),
                  "eagercomm-run: ... %llu more log line(s) like this from %d rank(s), not shown: ",
                  static_cast<unsigned long long>(s.count - kShown), s.held_rank_count);
    const std::string out = head + entry->first + "\n";
    write_fully(dest, out.data(), out.size());
  }
}

void OutputStream::on_readable() {
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

void OutputStream::close() {
  if (!pending_.empty()) emit(pending_);
  pending_.clear();
  fd_.reset();
}

void OutputStream::emit(std::string_view line) {
  if (repeats_ != nullptr && !repeats_->admit(rank_, line)) return;
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out += prefix_;
  out += line;
  out += '\n';
  write_fully(dest_, out.data(), out.size());
}

}  // namespace eagercomm::run
