// A cache of user-buffer registrations (DESIGN.md section 2: "registration is cached").
//
// Registering memory with an RDMA NIC pins pages and costs tens of microseconds, so runtimes
// register a user buffer once and reuse the region for every later operation on it. A lookup
// hits when a cached region of the same memory kind covers the requested range. Entries are
// evicted least-recently-used beyond `capacity`.
//
// What the NIC may still be using is never deregistered (issue 18, defect 11): get() returns a
// Lease, and the caller holds it until the operation using the region has completed (its
// kWriteDone, or the notification that the peer's write into it landed). An entry that is leased
// when eviction or invalidate() would drop it stays registered (the cache is over capacity
// meanwhile, or the entry is hidden from lookups) until its last lease ends.
//
// Registrations do not notice free(): pages freed and reallocated at the same address are other
// pages, and a stale region would have the NIC read and write the old ones. So the owner of the
// memory calls invalidate() before freeing it. (Noticing by itself needs memory-event hooks on
// munmap/brk, as UCX's ucm has, or on-demand-paging regions; neither is implemented.) No backend
// uses this cache on its own: it is for callers that register user buffers per operation.
//
// Not thread-safe: owned and used by one driver thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>

#include "runtime/memory.h"
#include "runtime/status.h"
#include "transport/transport.h"

namespace eagercomm {

class RegistrationCache {
  struct Entry {
    std::unique_ptr<MemoryRegion> region;
    uint32_t leases = 0;
    bool doomed = false;  // invalidated while leased: dropped when the last lease ends
  };
  using Entries = std::list<Entry>;

 public:
  // A cached region, kept registered for as long as the lease lives. Move-only.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : cache_(o.cache_), entry_(o.entry_) { o.cache_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    const MemoryRegion* region() const {
      return cache_ != nullptr ? entry_->region.get() : nullptr;
    }
    const MemoryRegion* operator->() const { return region(); }
    void release();

   private:
    friend class RegistrationCache;
    Lease(RegistrationCache* cache, Entries::iterator entry) : cache_(cache), entry_(entry) {}
    RegistrationCache* cache_ = nullptr;
    Entries::iterator entry_{};
  };

  RegistrationCache(Transport& transport, size_t capacity);
  // Leases must not outlive the cache.
  ~RegistrationCache() = default;

  // A registered region covering [data, data + bytes), leased.
  Result<Lease> get(void* data, size_t bytes, MemoryKind kind);
  // Drops every entry overlapping [data, data + bytes): now when not leased, else when its last
  // lease ends (it is not handed out again meanwhile). Call it before freeing such memory.
  void invalidate(const void* data, size_t bytes);

  size_t size() const { return entries_.size(); }  // registrations held, leased ones included
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  void unlease(Entries::iterator entry);
  void trim();  // evicts unleased entries, least recently used first, down to capacity

  Transport& transport_;
  const size_t capacity_;
  Entries entries_;  // most recently used first
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace eagercomm
