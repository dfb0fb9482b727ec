#include "transport/registration_cache.h"

namespace eagercomm {

RegistrationCache::RegistrationCache(Transport& transport, size_t capacity)
    : transport_(transport), capacity_(capacity == 0 ? 1 : capacity) {}

Result<const MemoryRegion*> RegistrationCache::get(void* data, size_t bytes, MemoryKind kind) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto base = reinterpret_cast<uintptr_t>((*it)->data());
    if ((*it)->kind() == kind && begin >= base && begin + bytes <= base + (*it)->size()) {
      ++hits_;
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().get();
    }
  }
  ++misses_;
  EC_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                      transport_.register_memory(data, bytes, kind));
  entries_.push_front(std::move(region));
  while (entries_.size() > capacity_) entries_.pop_back();
  return entries_.front().get();
}

void RegistrationCache::invalidate(const void* data, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  entries_.remove_if([&](const std::unique_ptr<MemoryRegion>& r) {
    const auto base = reinterpret_cast<uintptr_t>(r->data());
    return begin < base + r->size() && base < begin + bytes;
  });
}

}  // namespace eagercomm
