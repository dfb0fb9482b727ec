#include "transport/peer_liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "transport/transport_log.h"

namespace eagercomm {

Result<LivenessBeacon> LivenessBeacon::create(const std::string& name) {
  int fd = -1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST || attempt == 1) break;
    // A leftover of a crashed run with the same job id.
    (void)shm_unlink(name.c_str());
  }
  if (fd < 0) {
    const int err = errno;
    return make_status(StatusCode::kIoError, "liveness: cannot create %s: %s", name.c_str(),
                       strerror(err));
  }
  // A watcher's or a reclaiming scan's probe holds a shared lock for an instant (check()): wait
  // that out instead of failing; another owner's exclusive lock would not go away.
  int locked = -1;
  for (int attempt = 0; attempt < 200; ++attempt) {
    locked = flock(fd, LOCK_EX | LOCK_NB);
    if (locked == 0 || errno != EWOULDBLOCK) break;
    usleep(1000);
  }
  if (locked != 0) {
    const int err = errno;
    close(fd);
    (void)shm_unlink(name.c_str());
    return make_status(StatusCode::kIoError, "liveness: cannot lock %s: %s", name.c_str(),
                       strerror(err));
  }
  LivenessBeacon b;
  b.name_ = name;
  b.fd_ = fd;
  return b;
}

LivenessBeacon::LivenessBeacon(LivenessBeacon&& o) noexcept
    : name_(std::move(o.name_)), fd_(std::exchange(o.fd_, -1)) {}

LivenessBeacon& LivenessBeacon::operator=(LivenessBeacon&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

LivenessBeacon::~LivenessBeacon() { reset(); }

void LivenessBeacon::reset() {
  if (fd_ < 0) return;
  // Unlink first: a watcher that finds the lock free then also finds the name gone.
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    EC_WARN(kMem, "liveness: cannot unlink %s: %m", name_.c_str());
  }
  close(fd_);
  fd_ = -1;
}

Result<LivenessWatch> LivenessWatch::open(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    return make_status(err == ENOENT ? StatusCode::kUnavailable : StatusCode::kIoError,
                       "liveness: cannot open %s: %s", name.c_str(), strerror(err));
  }
  LivenessWatch w;
  w.fd_ = fd;
  w.name_ = name;
  return w;
}

LivenessWatch::LivenessWatch(LivenessWatch&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), name_(std::move(o.name_)) {}

LivenessWatch& LivenessWatch::operator=(LivenessWatch&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    name_ = std::move(o.name_);
  }
  return *this;
}

bool LivenessWatch::reap() const {
  if (check() != State::kDead) return false;
  // Mark the object dead (size 1) before removing its name: other watchers then still read
  // kDead from their open descriptors, where an unlinked object of size 0 means kLeft.
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno == ENOENT;  // another watcher was first
  // The name may already be another owner's (a job that reused the job id made it anew): then
  // the dead one's name is gone and the new object must not be touched.
  struct stat named {};
  struct stat watched {};
  if (fstat(fd, &named) != 0 || fstat(fd_, &watched) != 0 || named.st_ino != watched.st_ino ||
      named.st_dev != watched.st_dev) {
    close(fd);
    return true;
  }
  const bool marked = ftruncate(fd, 1) == 0;
  close(fd);
  if (!marked) {
    EC_WARN(kMem, "liveness: cannot mark the dead rank's beacon %s: %m", name_.c_str());
    return false;
  }
  if (shm_unlink(name_.c_str()) == 0 || errno == ENOENT) return true;
  EC_WARN(kMem, "liveness: cannot remove the dead rank's beacon %s: %m", name_.c_str());
  return false;
}

LivenessWatch::~LivenessWatch() {
  if (fd_ >= 0) close(fd_);
}

LivenessWatch::State LivenessWatch::check() const {
  if (fd_ < 0) return State::kAlive;
  if (flock(fd_, LOCK_SH | LOCK_NB) != 0) return State::kAlive;  // EWOULDBLOCK: owner holds it
  (void)flock(fd_, LOCK_UN);
  struct stat st {};
  if (fstat(fd_, &st) != 0) return State::kAlive;
  // Unlinked: by its owner (size 0, a normal exit) or by a watcher that found it dead (reap()
  // marks it with size 1 first).
  if (st.st_nlink == 0) return st.st_size == 0 ? State::kLeft : State::kDead;
  return State::kDead;
}

const char* liveness_state_name(LivenessWatch::State s) {
  switch (s) {
    case LivenessWatch::State::kAlive:
      return "alive";
    case LivenessWatch::State::kLeft:
      return "left";
    case LivenessWatch::State::kDead:
      return "dead";
  }
  return "?";
}

}  // namespace eagercomm
