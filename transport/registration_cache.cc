#include "transport/registration_cache.h"

namespace eagercomm {

RegistrationCache::Lease& RegistrationCache::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    cache_ = o.cache_;
    entry_ = o.entry_;
    o.cache_ = nullptr;
  }
  return *this;
}

void RegistrationCache::Lease::release() {
  if (cache_ == nullptr) return;
  RegistrationCache* cache = cache_;
  cache_ = nullptr;
  cache->unlease(entry_);
}

RegistrationCache::RegistrationCache(Transport& transport, size_t capacity)
    : transport_(transport), capacity_(capacity == 0 ? 1 : capacity) {}

Result<RegistrationCache::Lease> RegistrationCache::get(void* data, size_t bytes, MemoryKind kind) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const MemoryRegion& r = *it->region;
    const auto base = reinterpret_cast<uintptr_t>(r.data());
    if (!it->doomed && r.kind() == kind && begin >= base && begin + bytes <= base + r.size()) {
      ++hits_;
      entries_.splice(entries_.begin(), entries_, it);
      ++entries_.front().leases;
      return Lease(this, entries_.begin());
    }
  }
  ++misses_;
  EC_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                      transport_.register_memory(data, bytes, kind));
  entries_.push_front(Entry{std::move(region), 1, false});
  Lease lease(this, entries_.begin());
  trim();
  return lease;
}

void RegistrationCache::invalidate(const void* data, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const auto base = reinterpret_cast<uintptr_t>(it->region->data());
    if (begin < base + it->region->size() && base < begin + bytes) {
      if (it->leases == 0) {
        it = entries_.erase(it);
        continue;
      }
      it->doomed = true;
    }
    ++it;
  }
}

void RegistrationCache::unlease(Entries::iterator entry) {
  if (--entry->leases == 0 && entry->doomed) {
    entries_.erase(entry);
    return;
  }
  trim();
}

void RegistrationCache::trim() {
  for (auto it = entries_.end(); entries_.size() > capacity_ && it != entries_.begin();) {
    --it;
    if (it->leases == 0) it = entries_.erase(it);
  }
}

}  // namespace eagercomm
