#include "collectives/partial/lateness_ledger.h"

#include <algorithm>
#include <cstdio>

#include "collectives/partial/partial_meta.h"

namespace eagercomm::detail {

void LatenessLedger::account(uint64_t round, const void* tail, DataType type,
                             std::chrono::steady_clock::time_point now) {
  const int P = static_cast<int>(counts_.size());
  for (int p = 0; p < P; ++p) {
    const RankMeta m = read_rank_meta(tail, type, P, p, false);
    Counts& c = counts_[static_cast<size_t>(p)];
    c.posts += static_cast<uint64_t>(std::max(m.posts, 0));
    if (m.posts == 0) ++c.absent;
    if (m.fresh) ++c.fresh;
    if (m.age >= 1) {  // its oldest post was meant for an earlier round
      ++c.late;
      c.late_rounds += static_cast<uint64_t>(m.age);
      c.max_age = std::max(c.max_age, static_cast<uint32_t>(m.age));
    }
  }
  if (rounds_ == 0) {
    first_taken_ = now;
    window_first_round_ = round;
  }
  last_taken_ = now;
  ++rounds_;
}

double LatenessLedger::seconds_per_round() const {
  if (rounds_ < 2) return 0;
  return std::chrono::duration<double>(last_taken_ - first_taken_).count() /
         static_cast<double>(rounds_ - 1);
}

std::vector<RankLateness> LatenessLedger::totals() const {
  const double per_round = seconds_per_round();
  std::vector<RankLateness> out(counts_.size());
  for (size_t p = 0; p < counts_.size(); ++p) {
    const Counts& c = counts_[p];
    RankLateness& r = out[p];
    r.rounds = rounds_;
    r.posts = c.posts;
    r.fresh = c.fresh;
    r.late = c.late;
    r.absent = c.absent;
    r.late_rounds = c.late_rounds;
    r.max_age = static_cast<int>(c.max_age);
    r.late_seconds = static_cast<double>(c.late_rounds) * per_round;
  }
  return out;
}

std::string LatenessLedger::window_report() {
  if (window_start_.empty()) window_start_.resize(counts_.size());
  const uint64_t n = rounds_ - window_rounds_;
  if (n == 0) return "";
  struct Missed {
    int rank;
    uint64_t posts;
    uint64_t missed;  // posts that landed late
    uint64_t late;
    uint64_t late_rounds;
    double fraction() const {
      return posts ? static_cast<double>(missed) / static_cast<double>(posts) : 0;
    }
  };
  std::vector<Missed> missed;
  for (size_t p = 0; p < counts_.size(); ++p) {
    const Counts& now = counts_[p];
    const Counts& then = window_start_[p];
    const uint64_t posts = now.posts - then.posts;
    const uint64_t fresh = now.fresh - then.fresh;
    missed.push_back({static_cast<int>(p), posts, posts - std::min(posts, fresh),
                      now.late - then.late, now.late_rounds - then.late_rounds});
  }
  std::stable_sort(missed.begin(), missed.end(),
                   [](const Missed& a, const Missed& b) { return a.fraction() > b.fraction(); });
  const double per_round = seconds_per_round();
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "rounds %llu-%llu: ", static_cast<unsigned long long>(window_first_round_),
                static_cast<unsigned long long>(window_first_round_ + n - 1));
  std::string text = buf;
  constexpr int kNamed = 8;
  int named = 0, more = 0;
  for (const Missed& m : missed) {
    if (m.posts == 0 || 2 * m.missed < m.posts) break;
    if (named == kNamed) {
      ++more;
      continue;
    }
    const double rounds_late =
        m.late ? static_cast<double>(m.late_rounds) / static_cast<double>(m.late) : 0;
    std::snprintf(
        buf, sizeof buf,
        "%srank %d late with %llu of %llu posts (by %.1f rounds, ~%.1f ms, on average)",
        named ? ", " : "persistent stragglers: ", m.rank, static_cast<unsigned long long>(m.missed),
        static_cast<unsigned long long>(m.posts), rounds_late, rounds_late * per_round * 1e3);
    text += buf;
    ++named;
  }
  if (more) text += " and " + std::to_string(more) + " more";
  if (named == 0) {
    std::snprintf(buf, sizeof buf,
                  "no persistent straggler (latest: rank %d, %llu of %llu posts late)",
                  missed.front().rank, static_cast<unsigned long long>(missed.front().missed),
                  static_cast<unsigned long long>(missed.front().posts));
    text += buf;
  }
  window_start_ = counts_;
  window_rounds_ = rounds_;
  window_first_round_ += n;
  return text;
}

}  // namespace eagercomm::detail
