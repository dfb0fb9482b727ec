#include "transport/verbs/emulated/emu_port.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace eagercomm::verbs::emu {
namespace {

constexpr uint64_t kMagic = 0x65637665'6d750002ull;  // "ecvemu" + layout 2
constexpr uint32_t kVersion = 2;

bool pid_alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

Result<PortShared*> map(int fd) {
  void* p = mmap(nullptr, sizeof(PortShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return make_status(StatusCode::kUnavailable, "emulated verbs: mmap of a port: %s",
                       std::strerror(errno));
  }
  return static_cast<PortShared*>(p);
}

// Ownership of a port's name. The owner holds a shared flock(2) on its segment for as long as the
// port lives; the kernel drops it when the owner dies, however it dies. A segment whose lock can
// be taken exclusively has no owner: a leftover. Its name is unlinked only while holding that
// exclusive lock and only if the name still refers to the same segment, so two processes taking
// over one dead LID cannot unlink each other's new port (they once did: two live ports on one
// LID, and a healthy job failed with remote access errors).
bool same_segment(const std::string& name, int fd) {
  struct stat by_fd {
  }, by_name{};
  return fstat(fd, &by_fd) == 0 && stat(("/dev/shm" + name).c_str(), &by_name) == 0 &&
         by_fd.st_dev == by_name.st_dev && by_fd.st_ino == by_name.st_ino;
}

// Unlinks `name` if its segment has no owner. True when it did (or the name was gone already).
bool unlink_if_ownerless(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return errno == ENOENT;
  bool unlinked = false;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    // Locked by nobody: its owner died, or it is being created this instant (the creator locks
    // right after shm_open, before sizing it: a segment of size 0 is left alone).
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_size > 0 && same_segment(name, fd)) {
      unlinked = shm_unlink(name.c_str()) == 0 || errno == ENOENT;
    }
  }
  close(fd);  // releases the exclusive lock
  return unlinked;
}

// Unlinks the ports of this user whose owner died (a killed rank leaves its segment behind):
// they would fill /dev/shm, LIDs being handed out from a random start.
void reclaim_dead_ports() {
  const std::string prefix = "eagercomm-vemu-" + std::to_string(getuid()) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    unlink_if_ownerless(std::string("/") + e->d_name);
  }
  closedir(dir);
}

}  // namespace

std::string port_name(uint32_t lid) {
  return "/eagercomm-vemu-" + std::to_string(getuid()) + "-" + std::to_string(lid);
}

Port::Port(PortShared* shared, uint32_t lid, Role role, std::string name, int owner_fd)
    : shared_(shared),
      lid_(lid),
      owner_(role == Role::kOwner),
      name_(std::move(name)),
      owner_fd_(owner_fd) {}

Port::~Port() {
  if (owner_) {
    if (same_segment(name_, owner_fd_)) shm_unlink(name_.c_str());
    close(owner_fd_);
  }
  munmap(shared_, sizeof(PortShared));
}

Result<std::unique_ptr<Port>> Port::create() {
  reclaim_dead_ports();
  // From a random LID on: a LID just freed is not handed out again at once (a peer's QP may
  // still be connected to it; the QP tables' peer check drops what it sends regardless).
  const uint32_t first = std::random_device{}() % (kMaxLid - 1);
  for (uint32_t i = 0; i < kMaxLid - 1; ++i) {
    const uint32_t lid = 1 + (first + i) % (kMaxLid - 1);
    const std::string name = port_name(lid);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
      if (!unlink_if_ownerless(name)) continue;                      // taken by a live port
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);  // a leftover: take it over
    }
    if (fd < 0) {
      if (errno == EEXIST) continue;  // taken over by another process meanwhile
      return make_status(StatusCode::kUnavailable, "emulated verbs: shm_open(%s): %s", name.c_str(),
                         std::strerror(errno));
    }
    flock(fd, LOCK_SH);  // ownership, until the port goes (or this process dies)
    if (ftruncate(fd, sizeof(PortShared)) != 0) {
      const int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      return make_status(StatusCode::kUnavailable, "emulated verbs: sizing port %u: %s", lid,
                         std::strerror(e));
    }
    Result<PortShared*> mapped = map(fd);
    if (!mapped.ok()) {
      shm_unlink(name.c_str());
      close(fd);
      return mapped.status();
    }
    PortShared* s = mapped.value();
    s->pid = static_cast<int32_t>(getpid());
    s->lid = lid;
    s->head = 0;
    s->tail.store(0, std::memory_order_relaxed);
    for (QpSlot& q : s->qps) q.state.store(kQpFree, std::memory_order_relaxed);
    for (uint32_t i = 0; i < kRingSlots; ++i) s->ring[i].seq.store(i, std::memory_order_relaxed);
    s->version = kVersion;
    reinterpret_cast<std::atomic<uint64_t>*>(&s->magic)->store(kMagic, std::memory_order_release);
    return std::unique_ptr<Port>(new Port(s, lid, Role::kOwner, name, fd));
  }
  return Status(StatusCode::kUnavailable, "emulated verbs: every LID of this host is taken");
}

Result<std::unique_ptr<Port>> Port::attach(uint32_t lid) {
  const std::string name = port_name(lid);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return make_status(StatusCode::kPeerFailed, "emulated verbs: no port with LID %u (%s)", lid,
                       std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != sizeof(PortShared)) {
    close(fd);
    // Being created right now, or not ours: not usable (yet).
    return make_status(StatusCode::kUnavailable, "emulated verbs: port %u is not ready", lid);
  }
  Result<PortShared*> mapped = map(fd);
  close(fd);
  if (!mapped.ok()) return mapped.status();
  PortShared* s = mapped.value();
  auto port = std::unique_ptr<Port>(new Port(s, lid, Role::kPeer, name, -1));
  const uint64_t magic =
      reinterpret_cast<std::atomic<uint64_t>*>(&s->magic)->load(std::memory_order_acquire);
  if (magic != kMagic || s->version != kVersion || s->lid != lid) {
    return make_status(StatusCode::kUnavailable, "emulated verbs: port %u is not ready", lid);
  }
  if (!port->alive()) {
    return make_status(StatusCode::kPeerFailed, "emulated verbs: the owner of port %u is gone",
                       lid);
  }
  return port;
}

bool Port::alive() const { return pid_alive(shared_->pid); }

void Port::ring_doorbell() {
  PortShared& s = *shared_;
  s.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleeping.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, &s.doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

Packet* Port::peek() {
  PortShared& s = *shared_;
  Packet& p = s.ring[s.head & (kRingSlots - 1)];
  if (p.seq.load(std::memory_order_acquire) != s.head + 1) return nullptr;
  return &p;
}

void Port::release() {
  PortShared& s = *shared_;
  Packet& p = s.ring[s.head & (kRingSlots - 1)];
  p.seq.store(s.head + kRingSlots, std::memory_order_release);
  ++s.head;
}

}  // namespace eagercomm::verbs::emu
