// A cache of user-buffer registrations (DESIGN.md section 2: "registration is cached").
//
// Registering memory with an RDMA NIC pins pages and costs tens of microseconds, so runtimes
// register a user buffer once and reuse the region for every later operation on it. A lookup
// hits when a cached region of the same memory kind covers the requested range. Entries are
// evicted least-recently-used beyond `capacity`; invalidate() drops the entries overlapping a
// range the application is about to free (registrations do not notice free()).
//
// Not thread-safe: owned and used by the progress engine's driver.
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
 public:
  RegistrationCache(Transport& transport, size_t capacity);

  // A registered region covering [data, data + bytes). The pointer stays valid until the entry
  // is evicted or invalidated (at the earliest, the next get() or invalidate()).
  Result<const MemoryRegion*> get(void* data, size_t bytes, MemoryKind kind);
  // Drops every entry overlapping [data, data + bytes).
  void invalidate(const void* data, size_t bytes);

  size_t size() const { return entries_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  Transport& transport_;
  const size_t capacity_;
  std::list<std::unique_ptr<MemoryRegion>> entries_;  // most recently used first
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace eagercomm
