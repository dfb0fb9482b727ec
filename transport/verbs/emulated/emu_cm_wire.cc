// How the emulated rdma_cm's messages travel (emu_cm_wire.h): inboxes in shared memory and the
// port rings.
#include "transport/verbs/emulated/emu_cm_wire.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "transport/transport_log.h"

namespace eagercomm::verbs::emu {
namespace {

// Maps the inbox of channel `port`, creating (and emptying) it with `flags` O_CREAT | O_TRUNC.
Inbox* map_inbox(uint32_t port, int flags) {
  const std::string name = inbox_name(port);
  int fd = shm_open(name.c_str(), O_RDWR | flags, 0600);
  if (fd < 0) return nullptr;
  const bool create = (flags & O_CREAT) != 0;
  if (create && ftruncate(fd, sizeof(Inbox)) != 0) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(Inbox), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  auto* box = static_cast<Inbox*>(p);
  if (!create && box->magic.load(std::memory_order_acquire) != kInboxMagic) {
    munmap(p, sizeof(Inbox));
    return nullptr;
  }
  return box;
}

}  // namespace

std::string inbox_name(uint32_t port) {
  return "/eagercomm-vemucm-" + std::to_string(getuid()) + "-" + std::to_string(port);
}

Inbox* create_inbox(uint32_t port) {
  Inbox* box = map_inbox(port, O_CREAT | O_TRUNC);
  if (box == nullptr) return nullptr;
  box->pid = static_cast<int32_t>(getpid());
  box->port = port;
  box->head = 0;
  box->tail.store(0, std::memory_order_relaxed);
  for (uint32_t i = 0; i < kInboxSlots; ++i) box->ring[i].seq.store(i, std::memory_order_relaxed);
  box->magic.store(kInboxMagic, std::memory_order_release);
  return box;
}

Inbox* attach_inbox(uint32_t port) { return map_inbox(port, 0); }

void unmap_inbox(Inbox* box) { munmap(box, sizeof(Inbox)); }

void remove_inbox(uint32_t port, Inbox* box) {
  shm_unlink(inbox_name(port).c_str());
  unmap_inbox(box);
}

bool inbox_push(Inbox& box, const CmWire& m) {
  uint64_t pos = box.tail.load(std::memory_order_relaxed);
  for (;;) {
    InboxSlot& s = box.ring[pos & (kInboxSlots - 1)];
    const int64_t diff =
        static_cast<int64_t>(s.seq.load(std::memory_order_acquire)) - static_cast<int64_t>(pos);
    if (diff == 0) {
      if (box.tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        s.msg = m;
        s.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;
    } else {
      pos = box.tail.load(std::memory_order_relaxed);
    }
  }
}

bool inbox_pop(Inbox& box, CmWire* out) {
  InboxSlot& s = box.ring[box.head & (kInboxSlots - 1)];
  if (s.seq.load(std::memory_order_acquire) != box.head + 1) return false;
  *out = s.msg;
  s.seq.store(box.head + kInboxSlots, std::memory_order_release);
  ++box.head;
  return true;
}

bool send_to_inbox(const CmWire& m) {
  Inbox* box = attach_inbox(m.dst_port);
  if (box == nullptr) return false;
  bool sent = false;
  for (int tries = 0; tries < 1000 && !(sent = inbox_push(*box, m)); ++tries) usleep(100);
  unmap_inbox(box);
  return sent;
}

bool send_through_port(uint32_t lid, const CmWire& m) {
  Result<std::unique_ptr<Port>> port = Port::attach(lid);
  if (!port.ok()) return false;
  bool sent = false;
  for (int tries = 0; tries < 1000 && !sent; ++tries) {
    sent = port.value()->push([&m](Packet& p) {
      p.kind = PacketKind::kCm;
      p.flags = 0;
      p.len = sizeof(CmWire);
      std::memcpy(p.data, &m, sizeof(CmWire));
    });
    if (!sent) usleep(100);
  }
  if (sent) port.value()->ring_doorbell();
  return sent;
}

// An inbox belongs to whoever holds its TCP port: one this process can bind has no channel, and
// while bound here no channel can be made on that port and recreate the inbox, so the unlink
// races with nobody.
void reclaim_dead_inboxes() {
  const std::string prefix = "eagercomm-vemucm-" + std::to_string(getuid()) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    char* end = nullptr;
    const unsigned long port = std::strtoul(e->d_name + prefix.size(), &end, 10);
    if (end == e->d_name + prefix.size() || *end != '\0' || port == 0 || port > 65535) continue;
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) continue;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      shm_unlink(inbox_name(static_cast<uint32_t>(port)).c_str());
      EC_DEBUG(kNet, "emulated rdma_cm: reclaimed the inbox of port %lu (its process is gone)",
               port);
    }
    close(s);
  }
  closedir(dir);
}

}  // namespace eagercomm::verbs::emu
