#include "transport/shm/shm_reclaim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "transport/peer_liveness.h"
#include "transport/transport_log.h"

namespace eagercomm {
namespace {

constexpr std::string_view kPrefix = "eagercomm-";
constexpr std::string_view kBeaconSuffix = "-live";
constexpr std::string_view kShmBeaconTail = "-0-live";  // the control segment 0's beacon

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool all_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "eagercomm-<job>-<16 hex>-<rank>-" for the beacon "eagercomm-<job>-<16 hex>-<rank>-0-live" of
// an shm transport (shm_transport.cc names it after its control segment); empty otherwise.
std::string shm_owner_prefix(std::string_view beacon) {
  if (!beacon.ends_with(kShmBeaconTail)) return {};
  const std::string_view head = beacon.substr(0, beacon.size() - kShmBeaconTail.size());
  const size_t rank_dash = head.rfind('-');
  if (rank_dash == std::string_view::npos || !all_digits(head.substr(rank_dash + 1))) return {};
  const std::string_view scope = head.substr(0, rank_dash);
  if (scope.size() < 17 + kPrefix.size() || scope[scope.size() - 17] != '-' ||
      !all_hex(scope.substr(scope.size() - 16))) {
    return {};
  }
  return std::string(head) + "-";
}

enum class Age { kGone, kYoung, kOld };

// Whether `name` in `dir` is a plain object older than `cutoff` (realtime); its memory in
// `bytes`. Age is the change time: set at creation (and by ftruncate/fallocate, which happen
// only then), never by stores through a mapping.
Age age_of(int dir, const std::string& name, const timespec& cutoff, uint64_t& bytes) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Age::kGone;
  if (!S_ISREG(st.st_mode)) return Age::kYoung;  // not ours: never removed
  bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  const timespec& c = st.st_ctim;
  const bool old =
      c.tv_sec < cutoff.tv_sec || (c.tv_sec == cutoff.tv_sec && c.tv_nsec < cutoff.tv_nsec);
  return old ? Age::kOld : Age::kYoung;
}

// The eagercomm names in /dev/shm (`d`), sorted.
std::vector<std::string> list_names(DIR* d) {
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (std::string_view(e->d_name).starts_with(kPrefix)) names.emplace_back(e->d_name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Unlinks the segments `<prefix><n>` among `names` (only those older than `cutoff` when it is
// given); counts them and their memory into `objects` and `bytes`. False when one is left (too
// young, or not ours to remove): then the beacon must stay, or nothing would ever prove that
// segment's owner dead.
bool remove_segments(int dir, const std::vector<std::string>& names, const std::string& prefix,
                     const timespec* cutoff, int& objects, uint64_t& bytes) {
  const timespec any{std::numeric_limits<time_t>::max(), 0};
  bool all = true;
  const auto first = std::lower_bound(names.begin(), names.end(), prefix);
  for (auto it = first; it != names.end() && it->starts_with(prefix); ++it) {
    if (!all_digits(std::string_view(*it).substr(prefix.size()))) continue;
    uint64_t b = 0;
    const Age age = age_of(dir, *it, cutoff != nullptr ? *cutoff : any, b);
    if (age != Age::kOld) {
      if (age == Age::kYoung) all = false;  // kGone: removed meanwhile (another scan)
      continue;
    }
    if (::unlinkat(dir, it->c_str(), 0) != 0) {
      if (errno != ENOENT) all = false;
      continue;
    }
    EC_DEBUG(kMem, "shm: removed %s, a segment of a dead rank", it->c_str());
    ++objects;
    bytes += b;
  }
  return all;
}

}  // namespace

int shm_remove_dead_owner_segments(const std::string& beacon) {
  const std::string prefix = shm_owner_prefix(beacon.starts_with('/') ? beacon.substr(1) : beacon);
  if (prefix.empty()) return 0;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return 0;
  int objects = 0;
  uint64_t bytes = 0;
  remove_segments(::dirfd(d), list_names(d), prefix, nullptr, objects, bytes);
  ::closedir(d);
  return objects;
}

ShmReclaimed shm_reclaim_dead_jobs() {
  ShmReclaimed out;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  const int dir = ::dirfd(d);
  // The cutoff is taken before anything is looked at: an object made during the scan is newer.
  timespec cutoff{};
  ::clock_gettime(CLOCK_REALTIME, &cutoff);
  cutoff.tv_sec -= kShmReclaimMinAge.count();
  const std::vector<std::string> names = list_names(d);
  for (const std::string& beacon : names) {
    if (!std::string_view(beacon).ends_with(kBeaconSuffix)) continue;
    uint64_t beacon_bytes = 0;
    if (age_of(dir, beacon, cutoff, beacon_bytes) != Age::kOld) continue;
    // The age check comes first: probing the lock of a beacon whose owner is about to take it
    // could make that owner's LOCK_EX|LOCK_NB fail.
    Result<LivenessWatch> watch = LivenessWatch::open("/" + beacon);
    if (!watch.ok() || watch.value().check() != LivenessWatch::State::kDead) continue;
    // The owner is gone: its segments go first, the beacon last, so that a scan interrupted
    // half way is finished by the next one.
    int removed = 0;
    uint64_t bytes = 0;
    bool all = true;
    if (const std::string prefix = shm_owner_prefix(beacon); !prefix.empty()) {
      all = remove_segments(dir, names, prefix, &cutoff, removed, bytes);
    }
    // A segment made late (its owner died soon after) is too young yet: a later scan finishes.
    if (all && watch.value().reap()) {
      ++removed;
      bytes += beacon_bytes;
    }
    if (removed > 0) {
      ++out.owners;
      out.objects += removed;
      out.bytes += bytes;
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace eagercomm
