// Liveness of ranks on the same host, for backends whose peers can die without the transport
// noticing (shared memory: a killed process leaves its mappings valid and simply stops).
//
// A rank that may be watched holds a LivenessBeacon: a small POSIX shared-memory object on
// which it keeps an exclusive flock(2) for as long as the beacon lives. A watcher opens the
// object (LivenessWatch) and asks, without blocking, whether it could take a shared lock:
//   lock held by the owner                       -> kAlive
//   lock free and the name unlinked by its owner -> kLeft  (the beacon was destroyed: a normal
//                                                           exit, announced by other means)
//   lock free and the name still there           -> kDead  (the kernel dropped the lock when
//                                                           the process died: SIGKILL, crash)
//   lock free, unlinked, marked dead (size 1)    -> kDead  (a watcher saw it dead and reaped it)
// The kernel releases the lock of a dead process, so this needs no heartbeat traffic, cannot
// be fooled by a reused pid and works across pid namespaces that share /dev/shm. Limitation: a
// child forked without exec after the beacon was made shares the lock (flock belongs to the
// open file description); the owner is then seen alive until that child is gone too.
//
// Names follow the shm segment convention (/eagercomm-<job>-...), so the launcher's cleanup of
// a crashed job removes beacons with the job's segments, and a free beacon tells a later job
// that its owner's leftovers may go (shm_reclaim.h).
#pragma once

#include <string>

#include "runtime/status.h"

namespace eagercomm {

class LivenessBeacon {
 public:
  // Creates (or takes over a stale) object `name` ("/..." as for shm_open) and locks it.
  static Result<LivenessBeacon> create(const std::string& name);
  LivenessBeacon() = default;
  LivenessBeacon(LivenessBeacon&& o) noexcept;
  LivenessBeacon& operator=(LivenessBeacon&& o) noexcept;
  LivenessBeacon(const LivenessBeacon&) = delete;
  LivenessBeacon& operator=(const LivenessBeacon&) = delete;
  // Unlinks the name, then releases the lock: watchers see kLeft, never kDead.
  ~LivenessBeacon();
  void reset();
  const std::string& name() const { return name_; }
  bool valid() const { return fd_ >= 0; }

 private:
  std::string name_;
  int fd_ = -1;
};

class LivenessWatch {
 public:
  enum class State { kAlive, kLeft, kDead };
  // Opens the beacon `name` of another rank. kUnavailable when it does not exist.
  static Result<LivenessWatch> open(const std::string& name);
  LivenessWatch() = default;
  LivenessWatch(LivenessWatch&& o) noexcept;
  LivenessWatch& operator=(LivenessWatch&& o) noexcept;
  LivenessWatch(const LivenessWatch&) = delete;
  LivenessWatch& operator=(const LivenessWatch&) = delete;
  ~LivenessWatch();
  bool valid() const { return fd_ >= 0; }
  // One non-blocking probe (two system calls). A watch that is not valid reports kAlive.
  State check() const;
  // Removes the beacon's name when its owner is dead (check() says kDead), so that a rank killed
  // outside eagercomm-run (whose cleanup would remove it) leaves nothing in /dev/shm once a peer
  // has noticed; the object is marked first, so other watchers still see kDead. Names are never
  // reused (they carry a random instance), so this cannot remove a live rank's beacon. True when
  // the name was removed (by this call or another watcher).
  bool reap() const;

 private:
  int fd_ = -1;
  std::string name_;
};

const char* liveness_state_name(LivenessWatch::State s);

}  // namespace eagercomm
