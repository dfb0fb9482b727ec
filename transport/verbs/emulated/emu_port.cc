#include "transport/verbs/emulated/emu_port.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace eagercomm::verbs::emu {
namespace {

constexpr uint64_t kMagic = 0x65637665'6d750001ull;  // "ecvemu" + layout 1
constexpr uint32_t kVersion = 1;

bool pid_alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

Result<PortShared*> map(int fd) {
  void* p = mmap(nullptr, sizeof(PortShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return make_status(StatusCode::kUnavailable, "emulated verbs: mmap of a port: %s",
                       std::strerror(errno));
  }
  return static_cast<PortShared*>(p);
}

}  // namespace

std::string port_name(uint32_t lid) {
  return "/eagercomm-vemu-" + std::to_string(getuid()) + "-" + std::to_string(lid);
}

Port::Port(PortShared* shared, uint32_t lid, bool owner, std::string name)
    : shared_(shared), lid_(lid), owner_(owner), name_(std::move(name)) {}

Port::~Port() {
  if (owner_) shm_unlink(name_.c_str());
  munmap(shared_, sizeof(PortShared));
}

Result<std::unique_ptr<Port>> Port::create() {
  for (uint32_t lid = 1; lid < kMaxLid; ++lid) {
    const std::string name = port_name(lid);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
      // Taken, unless its owner died (then the segment is a leftover: take it over).
      auto existing = attach(lid);
      if (existing.ok() || existing.status().code() != StatusCode::kPeerFailed) continue;
      shm_unlink(name.c_str());
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    if (fd < 0) {
      if (errno == EEXIST) continue;  // another process took it meanwhile
      return make_status(StatusCode::kUnavailable, "emulated verbs: shm_open(%s): %s", name.c_str(),
                         std::strerror(errno));
    }
    if (ftruncate(fd, sizeof(PortShared)) != 0) {
      const int e = errno;
      close(fd);
      shm_unlink(name.c_str());
      return make_status(StatusCode::kUnavailable, "emulated verbs: sizing port %u: %s", lid,
                         std::strerror(e));
    }
    Result<PortShared*> mapped = map(fd);
    close(fd);
    if (!mapped.ok()) {
      shm_unlink(name.c_str());
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
    return std::unique_ptr<Port>(new Port(s, lid, true, name));
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
  auto port = std::unique_ptr<Port>(new Port(s, lid, false, name));
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
