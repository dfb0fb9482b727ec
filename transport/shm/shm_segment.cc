#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "runtime/hash.h"
#include "transport/shm/shm_segment_header.h"
#include "transport/transport_log.h"

namespace eagercomm {
namespace {

constexpr uint32_t kKeyMagic = 0x48534345;  // "ECSH"
constexpr uint16_t kKeyVersion = 1;
constexpr size_t kPage = 4096;

// The fixed part of a packed key; the name's bytes follow.
struct PackedKeyHead {
  uint32_t magic;
  uint16_t version;
  uint16_t name_len;
  int32_t owner;
  uint32_t kind;
  uint64_t bytes;
  uint64_t check;
};
static_assert(sizeof(PackedKeyHead) == 32);

bool name_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

uint64_t map_bytes_for(uint64_t payload) {
  return kShmHeaderBytes + (payload + kPage - 1) / kPage * kPage;
}

bool valid_kind(uint32_t kind) {
  return kind == static_cast<uint32_t>(ShmSegmentKind::kControl) ||
         kind == static_cast<uint32_t>(ShmSegmentKind::kData);
}

}  // namespace

std::string shm_sanitize_job_id(std::string_view job_id) {
  std::string out(job_id);
  for (char& c : out) {
    if (!name_char_ok(c)) c = '_';
  }
  return out;
}

std::string shm_scope_hash(std::string_view scope) {
  const uint64_t h = fnv1a(scope);
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string shm_scope_prefix(std::string_view job_id, std::string_view scope) {
  return "/eagercomm-" + shm_sanitize_job_id(job_id) + "-" + shm_scope_hash(scope) + "-";
}

std::string shm_segment_name(std::string_view job_id, std::string_view scope, int rank,
                             uint64_t n) {
  return shm_scope_prefix(job_id, scope) + std::to_string(rank) + "-" + std::to_string(n);
}

std::vector<uint8_t> ShmKey::pack() const {
  PackedKeyHead head{kKeyMagic,
                     kKeyVersion,
                     static_cast<uint16_t>(name.size()),
                     owner,
                     static_cast<uint32_t>(kind),
                     bytes,
                     check};
  std::vector<uint8_t> out(sizeof(head) + name.size());
  std::memcpy(out.data(), &head, sizeof(head));
  std::memcpy(out.data() + sizeof(head), name.data(), name.size());
  return out;
}

Result<ShmKey> ShmKey::unpack(std::span<const uint8_t> blob, const char* what) {
  PackedKeyHead head;
  if (blob.size() < sizeof(head)) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s has %zu bytes, too short for an shm key (at least %zu)", what,
                       blob.size(), sizeof(head) + 2);
  }
  std::memcpy(&head, blob.data(), sizeof(head));
  if (head.magic != kKeyMagic || head.version != kKeyVersion) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s is not an shm key (magic 0x%08x version %u; is every rank on the "
                       "shm transport?)",
                       what, head.magic, head.version);
  }
  if (blob.size() != sizeof(head) + head.name_len) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s has %zu bytes but announces a %u-character name", what, blob.size(),
                       head.name_len);
  }
  ShmKey key;
  key.name.assign(reinterpret_cast<const char*>(blob.data()) + sizeof(head), head.name_len);
  // NAME_MAX bounds the name without its leading '/'.
  bool name_ok = key.name.size() >= 2 && key.name.size() <= NAME_MAX + 1 && key.name[0] == '/';
  for (size_t i = 1; name_ok && i < key.name.size(); ++i) name_ok = name_char_ok(key.name[i]);
  if (!name_ok) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s names an invalid segment (%u characters; expected '/' then "
                       "1..%d of [A-Za-z0-9_-])",
                       what, head.name_len, NAME_MAX);
  }
  if (!valid_kind(head.kind)) {
    return make_status(StatusCode::kProtocolError, "shm: %s has an unknown segment kind %u", what,
                       head.kind);
  }
  if (head.bytes > kShmMaxPayloadBytes) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s names %llu bytes, more than the %llu an shm segment may have", what,
                       static_cast<unsigned long long>(head.bytes),
                       static_cast<unsigned long long>(kShmMaxPayloadBytes));
  }
  key.bytes = head.bytes;
  key.owner = head.owner;
  key.kind = static_cast<ShmSegmentKind>(head.kind);
  key.check = head.check;
  return key;
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::create(const std::string& name, uint64_t bytes,
                                                       int32_t owner, ShmSegmentKind kind) {
  if (bytes > kShmMaxPayloadBytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "shm: cannot allocate %llu bytes (at most %llu per segment)",
                       static_cast<unsigned long long>(bytes),
                       static_cast<unsigned long long>(kShmMaxPayloadBytes));
  }
  if (name.size() < 2 || name.size() > NAME_MAX + 1 || name[0] != '/') {
    return make_status(StatusCode::kInvalidArgument,
                       "shm: segment name '%s' is not '/' followed by 1..%d characters",
                       name.c_str(), NAME_MAX);
  }
  const uint64_t map_bytes = map_bytes_for(bytes);
  int fd = -1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST || attempt == 1) break;
    // A leftover of a crashed run that used the same job id: ours now.
    EC_DEBUG(kMem, "shm: segment %s already exists (stale, from an earlier run); unlinking it",
             name.c_str());
    if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) break;
  }
  if (fd < 0) {
    const int err = errno;
    EC_ERROR(kMem, "shm: cannot create segment %s: %s", name.c_str(), strerror(err));
    return make_status(
        err == ENAMETOOLONG || err == EINVAL ? StatusCode::kInvalidArgument : StatusCode::kIoError,
        "shm: cannot create segment %s: %s", name.c_str(), strerror(err));
  }
  // From here on the name is ours: any failure unlinks it again.
  auto fail = [&](StatusCode code, const char* what, int err) {
    EC_ERROR(kMem, "shm: %s segment %s (%llu bytes): %s", what, name.c_str(),
             static_cast<unsigned long long>(map_bytes), strerror(err));
    close(fd);
    shm_unlink(name.c_str());
    return make_status(code, "shm: %s segment %s (%llu bytes): %s%s", what, name.c_str(),
                       static_cast<unsigned long long>(map_bytes), strerror(err),
                       err == ENOSPC ? " (is /dev/shm large enough?)" : "");
  };
  int err;
  do {
    err = posix_fallocate(fd, 0, static_cast<off_t>(map_bytes));
  } while (err == EINTR);
  if (err == EOPNOTSUPP || err == EINVAL) {
    // Not tmpfs (an odd /dev/shm): a sparse object still works, just without the reservation.
    err = ftruncate(fd, static_cast<off_t>(map_bytes)) == 0 ? 0 : errno;
  }
  if (err != 0) {
    return fail(err == ENOSPC || err == ENOMEM ? StatusCode::kNoMemory : StatusCode::kIoError,
                "cannot reserve memory for", err);
  }
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(StatusCode::kNoMemory, "cannot map", errno);
  close(fd);
  auto* base = static_cast<uint8_t*>(p);
  // The first bytes of the segment (shm_segment_header.h), written before its key is published.
  const ShmKey made{name, bytes, owner, kind, shm_random_u64()};
  const auto header = shm_segment_header(made);
  std::memcpy(base, header.data(), header.size());
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(name, base, map_bytes, bytes, owner, kind, made.check));
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::open(const ShmKey& key, const char* what) {
  const int fd = shm_open(key.name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return make_status(StatusCode::kPeerFailed,
                         "shm: %s names segment %s, which does not exist (freed, or rank %d is "
                         "gone)",
                         what, key.name.c_str(), key.owner);
    }
    EC_ERROR(kMem, "shm: cannot open segment %s of rank %d: %s", key.name.c_str(), key.owner,
             strerror(err));
    return make_status(StatusCode::kIoError, "shm: cannot open segment %s of rank %d: %s",
                       key.name.c_str(), key.owner, strerror(err));
  }
  const uint64_t map_bytes = map_bytes_for(key.bytes);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    EC_ERROR(kMem, "shm: cannot stat segment %s: %s", key.name.c_str(), strerror(err));
    return make_status(StatusCode::kIoError, "shm: cannot stat segment %s: %s", key.name.c_str(),
                       strerror(err));
  }
  // Mapping more than the object holds would fault (SIGBUS) on the first touch past its end.
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) != map_bytes) {
    close(fd);
    return make_status(StatusCode::kProtocolError,
                       "shm: segment %s has %lld bytes but %s says %llu (a stale segment of an "
                       "earlier run, or a bad key)",
                       key.name.c_str(), static_cast<long long>(st.st_size), what,
                       static_cast<unsigned long long>(map_bytes));
  }
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    EC_ERROR(kMem, "shm: cannot map segment %s (%llu bytes): %s", key.name.c_str(),
             static_cast<unsigned long long>(map_bytes), strerror(map_err));
    return make_status(StatusCode::kNoMemory, "shm: cannot map segment %s (%llu bytes): %s",
                       key.name.c_str(), static_cast<unsigned long long>(map_bytes),
                       strerror(map_err));
  }
  auto* base = static_cast<uint8_t*>(p);
  if (Status s = shm_check_segment_header(std::span(base, kShmSegmentHeaderBytes), key, what);
      !s.ok()) {
    munmap(p, map_bytes);
    return s;
  }
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(key.name, base, map_bytes, key.bytes, key.owner, key.kind, key.check));
}

ShmSegment::~ShmSegment() {
  if (munmap(base_, map_bytes_) != 0) {
    EC_WARN(kMem, "shm: cannot unmap segment %s: %m", name_.c_str());
  }
}

void ShmOwnedNames::add(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  names_.insert(name);
}

void ShmOwnedNames::release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (names_.erase(name) > 0) shm_unlink_quietly(name);
}

void ShmOwnedNames::release_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names_) shm_unlink_quietly(name);
  names_.clear();
}

void shm_unlink_quietly(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    EC_WARN(kMem, "shm: cannot unlink segment %s: %m", name.c_str());
  }
}

uint64_t shm_random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) == static_cast<ssize_t>(sizeof(v))) return v;
  // No getrandom (old kernel, seccomp): distinct enough for check values and job ids.
  static std::atomic<uint64_t> counter{0};
  v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  v ^= static_cast<uint64_t>(getpid()) << 32;
  v += counter.fetch_add(0x9e3779b97f4a7c15ull);
  v ^= v >> 31;
  v *= 0xbf58476d1ce4e5b9ull;
  return v ^ (v >> 29);
}

}  // namespace eagercomm
