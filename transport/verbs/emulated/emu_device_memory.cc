#include "transport/verbs/emulated/emu_device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace eagercomm::verbs::emu {
namespace {

struct Range {
  uint64_t app;
  uint64_t alias;
  uint64_t bytes;
};

// The live allocations: registration and the checks look ranges up (never on a data path).
std::mutex& ranges_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<Range>& ranges() {
  static std::vector<Range> v;
  return v;
}

const Range* find(uint64_t addr, uint64_t length) {
  for (const Range& r : ranges()) {
    if (addr >= r.app && length <= r.bytes && addr - r.app <= r.bytes - length) return &r;
  }
  return nullptr;
}

}  // namespace

Result<DeviceMemory> DeviceMemory::allocate(size_t bytes) {
  if (bytes == 0) return Status(StatusCode::kInvalidArgument, "emulated device memory: 0 bytes");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  const int fd = memfd_create("eagercomm-emu-device-memory", MFD_CLOEXEC);
  if (fd < 0) {
    return make_status(StatusCode::kNoMemory, "emulated device memory: memfd_create: %s",
                       std::strerror(errno));
  }
  DeviceMemory m;
  if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    const int e = errno;
    close(fd);
    return make_status(StatusCode::kNoMemory, "emulated device memory: %zu bytes: %s", bytes,
                       std::strerror(e));
  }
  void* alias = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* app =
      alias == MAP_FAILED ? MAP_FAILED : mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);  // the mappings keep the memory
  if (alias == MAP_FAILED || app == MAP_FAILED) {
    if (alias != MAP_FAILED) munmap(alias, mapped);
    return make_status(StatusCode::kNoMemory, "emulated device memory: mmap: %s", std::strerror(e));
  }
  m.app_ = app;
  m.alias_ = alias;
  m.bytes_ = bytes;
  m.mapped_ = mapped;
  std::lock_guard<std::mutex> lock(ranges_mu());
  ranges().push_back({reinterpret_cast<uintptr_t>(app), reinterpret_cast<uintptr_t>(alias),
                      static_cast<uint64_t>(bytes)});
  return m;
}

DeviceMemory::DeviceMemory(DeviceMemory&& o) noexcept
    : app_(o.app_), alias_(o.alias_), bytes_(o.bytes_), mapped_(o.mapped_) {
  o.app_ = o.alias_ = nullptr;
  o.bytes_ = o.mapped_ = 0;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    reset();
    app_ = o.app_;
    alias_ = o.alias_;
    bytes_ = o.bytes_;
    mapped_ = o.mapped_;
    o.app_ = o.alias_ = nullptr;
    o.bytes_ = o.mapped_ = 0;
  }
  return *this;
}

DeviceMemory::~DeviceMemory() { reset(); }

void DeviceMemory::reset() {
  if (app_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(ranges_mu());
    auto& v = ranges();
    std::erase_if(v, [this](const Range& r) { return r.app == reinterpret_cast<uintptr_t>(app_); });
  }
  munmap(app_, mapped_);
  munmap(alias_, mapped_);
  app_ = alias_ = nullptr;
  bytes_ = mapped_ = 0;
}

Status DeviceMemory::copy_in(size_t offset, const void* src, size_t n) {
  if (offset > bytes_ || n > bytes_ - offset) {
    return make_status(StatusCode::kInvalidArgument,
                       "emulated device memory: copy of %zu bytes at %zu into %zu", n, offset,
                       bytes_);
  }
  std::memcpy(static_cast<uint8_t*>(alias_) + offset, src, n);
  return Status::Ok();
}

Status DeviceMemory::copy_out(size_t offset, void* dst, size_t n) const {
  if (offset > bytes_ || n > bytes_ - offset) {
    return make_status(StatusCode::kInvalidArgument,
                       "emulated device memory: copy of %zu bytes at %zu out of %zu", n, offset,
                       bytes_);
  }
  std::memcpy(dst, static_cast<const uint8_t*>(alias_) + offset, n);
  return Status::Ok();
}

uint64_t device_address(uint64_t addr, uint64_t length) {
  std::lock_guard<std::mutex> lock(ranges_mu());
  const Range* r = find(addr, length);
  return r != nullptr ? r->alias + (addr - r->app) : addr;
}

bool is_device_memory(const void* addr, size_t length) {
  std::lock_guard<std::mutex> lock(ranges_mu());
  return find(reinterpret_cast<uintptr_t>(addr), length) != nullptr;
}

}  // namespace eagercomm::verbs::emu
