// POSIX shared-memory segments for the `shm` transport: names, remote keys, RAII mappings.
//
// A segment is one shm_open() object: a 4 KiB header page (magic, kind, owner rank, payload
// size, a random check value) followed by the payload, page-aligned. Its remote key carries
// (name, payload size, owner rank, kind, check); importing maps the object by name and accepts
// it only if the object's size and header agree with the key, so a stale object left by a
// crashed run under the same name, or a forged key, is an error and never a wild mapping.
//
// Names are `/eagercomm-<job>-<scope hash>-<rank>-<n>` (shm_segment_name()), which is what lets
// a launcher remove `/dev/shm/eagercomm-<job>-*` after a crash.
//
// Thread-safety: a ShmSegment is immutable after creation (the mapping is shared by whoever
// holds it); ShmOwnedNames is thread-safe. The free functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace eagercomm {

// What a segment holds; recorded in its header and its key so one kind cannot pose as another.
enum class ShmSegmentKind : uint32_t { kControl = 1, kData = 2 };

inline constexpr size_t kShmHeaderBytes = 4096;
// Largest payload a key may name (64 TiB): keeps every size computation far from overflow.
inline constexpr uint64_t kShmMaxPayloadBytes = uint64_t{1} << 46;
// Longest job id accepted in segment names: NAME_MAX (255) less the other name parts.
inline constexpr size_t kShmMaxJobIdChars = 128;

// Replaces every character outside [A-Za-z0-9_-] with '_'.
std::string shm_sanitize_job_id(std::string_view job_id);
// 16 hex digits (FNV-1a 64) of a communicator scope.
std::string shm_scope_hash(std::string_view scope);
// "/eagercomm-<job>-<scope hash>-" (job sanitized): every segment name of this scope starts so.
std::string shm_scope_prefix(std::string_view job_id, std::string_view scope);
// "/eagercomm-<job>-<scope hash>-<rank>-<n>".
std::string shm_segment_name(std::string_view job_id, std::string_view scope, int rank, uint64_t n);

// The decoded contents of a remote key.
struct ShmKey {
  std::string name;
  uint64_t bytes = 0;  // payload bytes (the header page is not counted)
  int32_t owner = -1;
  ShmSegmentKind kind = ShmSegmentKind::kData;
  uint64_t check = 0;

  std::vector<uint8_t> pack() const;
  // Checks the framing, the magic, the name's characters and length, and the size bound.
  // `what` names the blob in errors ("remote key from rank 2"). kProtocolError when malformed.
  static Result<ShmKey> unpack(std::span<const uint8_t> blob, const char* what);
};

// One mapping of one segment. The creator's object unlinks nothing by itself: the name's
// lifetime is managed by ShmOwnedNames, because peers must keep their mappings after an unlink.
class ShmSegment {
 public:
  // Creates `name` (O_CREAT|O_EXCL, mode 0600) with `bytes` of zero-filled payload, backs every
  // page with posix_fallocate (a full /dev/shm is then an error here instead of SIGBUS on first
  // touch), maps it and writes the header with a fresh random check value. An object already
  // there under that name is a stale one from a crashed run: it is unlinked and creation is
  // retried once.
  static Result<std::unique_ptr<ShmSegment>> create(const std::string& name, uint64_t bytes,
                                                    int32_t owner, ShmSegmentKind kind);
  // Maps the segment a key names; the object's size and header must match the key. `what`
  // names the key's source in errors.
  static Result<std::unique_ptr<ShmSegment>> open(const ShmKey& key, const char* what);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  uint8_t* payload() const { return base_ + kShmHeaderBytes; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  int32_t owner() const { return owner_; }
  uint64_t check() const { return check_; }
  ShmSegmentKind kind() const { return kind_; }
  ShmKey key() const { return ShmKey{name_, payload_bytes_, owner_, kind_, check_}; }

 private:
  ShmSegment(std::string name, uint8_t* base, size_t map_bytes, uint64_t payload_bytes,
             int32_t owner, ShmSegmentKind kind, uint64_t check)
      : name_(std::move(name)),
        base_(base),
        map_bytes_(map_bytes),
        payload_bytes_(payload_bytes),
        owner_(owner),
        kind_(kind),
        check_(check) {}

  std::string name_;
  uint8_t* base_;
  size_t map_bytes_;
  uint64_t payload_bytes_;
  int32_t owner_;
  ShmSegmentKind kind_;
  uint64_t check_;
};

// The names of the segments one transport created and has not unlinked yet. A region unlinks
// its name when it is destroyed; the transport unlinks whatever is left when it is destroyed
// (regions may outlive it: their mappings stay valid, only the names go). Each name is
// unlinked exactly once, so a name reused later by another run is never removed by mistake.
// Thread-safe (regions may be destroyed on any thread; allocation is not a data path).
class ShmOwnedNames {
 public:
  void add(const std::string& name);
  // Unlinks `name` if it is still owned.
  void release(const std::string& name);
  // Unlinks every owned name.
  void release_all();

 private:
  std::mutex mu_;
  std::set<std::string> names_;
};

// Unlinks `name`; a name already gone is not an error. Logs other failures at warn.
void shm_unlink_quietly(const std::string& name);

// 64 random bits from getrandom(2) (falls back to a clock/pid mix if it is unavailable).
uint64_t shm_random_u64();

}  // namespace eagercomm
