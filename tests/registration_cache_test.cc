// The registration cache (transport/registration_cache.h) over the inproc backend: hits,
// least-recently-used eviction, invalidation, and leases that keep what the NIC may still use
// registered (issue 18, defect 11).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "tests/transport_pair.h"
#include "transport/registration_cache.h"

namespace eagercomm::test {
namespace {

TEST(RegistrationCache, HitsCoveringRangesAndEvictsLeastRecentlyUsed) {
  Transports tp(1);
  RegistrationCache cache(tp[0], 2);
  std::vector<uint8_t> a(1000), b(1000), c(1000);
  {
    auto ra = cache.get(a.data(), a.size(), MemoryKind::kHost);
    ASSERT_TRUE(ra.ok());
    auto ra2 = cache.get(a.data() + 10, 100, MemoryKind::kHost);
    ASSERT_TRUE(ra2.ok());
    EXPECT_EQ(ra.value().region(), ra2.value().region());
    EXPECT_EQ(cache.hits(), 1u);
  }
  ASSERT_TRUE(cache.get(b.data(), b.size(), MemoryKind::kHost).ok());
  ASSERT_TRUE(cache.get(a.data(), 1, MemoryKind::kHost).ok());         // a is now most recent
  ASSERT_TRUE(cache.get(c.data(), c.size(), MemoryKind::kHost).ok());  // evicts b
  EXPECT_EQ(cache.size(), 2u);
  const uint64_t misses = cache.misses();
  ASSERT_TRUE(cache.get(a.data(), 5, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), misses);
  ASSERT_TRUE(cache.get(b.data(), 5, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), misses + 1);
  // A range reaching past a cached region is a new registration.
  ASSERT_TRUE(cache.get(b.data() + 900, 200, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), misses + 2);
  cache.invalidate(b.data() + 2, 1);  // overlaps the 5-byte registration of b
  const uint64_t before = cache.misses();
  ASSERT_TRUE(cache.get(b.data(), 5, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), before + 1) << "an invalidated range must be registered again";
  // A failed registration (host memory passed as CUDA memory) is reported, not cached.
  const size_t cached = cache.size();
  EXPECT_FALSE(cache.get(a.data(), 4, MemoryKind::kCuda).ok());
  EXPECT_EQ(cache.size(), cached);
}

// Registrations as a NIC would hold them: each one alive until its region is destroyed.
class CountingRegion final : public MemoryRegion {
 public:
  CountingRegion(void* data, size_t bytes, std::vector<const void*>& live)
      : MemoryRegion(data, bytes, MemoryKind::kHost), live_(live) {
    live_.push_back(data);
  }
  ~CountingRegion() override { live_.erase(std::find(live_.begin(), live_.end(), data())); }

 private:
  std::vector<const void*>& live_;
};

class CountingTransport final : public Transport {
 public:
  CountingTransport() : Transport(0, 1) {}
  std::vector<const void*> live;  // the registered ranges' starts
  std::string_view name() const override { return "counting"; }
  Result<std::unique_ptr<MemoryRegion>> allocate(size_t, MemoryKind) override { return refused(); }
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind) override {
    return std::unique_ptr<MemoryRegion>(std::make_unique<CountingRegion>(data, bytes, live));
  }
  Result<std::unique_ptr<RemoteRegion>> import_region(int, std::span<const uint8_t>) override {
    return refused();
  }
  std::vector<uint8_t> local_address() const override { return {}; }
  Status connect(int, std::span<const uint8_t>) override { return refused(); }
  Status write(const MemoryRegion&, size_t, const RemoteRegion&, size_t, size_t, uint32_t,
               uint64_t) override {
    return refused();
  }
  Status notify(int, uint32_t) override { return refused(); }
  size_t poll(std::span<TransportCompletion>) override { return 0; }
  void wait(std::chrono::nanoseconds) override {}
  void wake() override {}
  void close() override {}

 private:
  static Status refused() { return Status(StatusCode::kNotSupported, "not in this test"); }
};

bool registered(const CountingTransport& t, const void* p) {
  return std::find(t.live.begin(), t.live.end(), p) != t.live.end();
}

// Defect 11: eviction deregistered a region whatever was in flight from or into it. A leased
// region stays registered until its lease ends, and only then goes.
TEST(RegistrationCache, ALeasedRegionOutlivesEvictionAndInvalidation) {
  CountingTransport t;
  RegistrationCache cache(t, 1);
  std::vector<uint8_t> a(4096), b(4096);
  auto held = cache.get(a.data(), a.size(), MemoryKind::kHost);
  ASSERT_TRUE(held.ok());
  const MemoryRegion* region = held.value().region();
  {
    auto other = cache.get(b.data(), b.size(), MemoryKind::kHost);  // would evict a
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(cache.size(), 2u) << "over capacity while both are leased";
    EXPECT_TRUE(registered(t, a.data())) << "a is leased: the NIC may still use it";
    EXPECT_EQ(held.value().region(), region);
  }
  EXPECT_EQ(cache.size(), 1u) << "b's lease ended: b, the only unleased entry, went";
  EXPECT_TRUE(registered(t, a.data()));
  EXPECT_FALSE(registered(t, b.data()));
  held.value().release();
  EXPECT_TRUE(registered(t, a.data())) << "within capacity: kept for the next hit";
  // Invalidation while leased: hidden from lookups at once, deregistered at the lease's end.
  auto again = cache.get(a.data(), a.size(), MemoryKind::kHost);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().region(), region) << "a hit";
  cache.invalidate(a.data(), 1);
  EXPECT_TRUE(registered(t, a.data())) << "still leased";
  const uint64_t misses = cache.misses();
  {
    auto fresh = cache.get(a.data(), a.size(), MemoryKind::kHost);
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(cache.misses(), misses + 1) << "an invalidated entry is not handed out";
    EXPECT_NE(fresh.value().region(), region);
  }
  // The fresh one, unleased, went to stay within capacity; the doomed one is still leased.
  EXPECT_EQ(t.live.size(), 1u);
  RegistrationCache::Lease moved = std::move(again.value());
  EXPECT_EQ(again.value().region(), nullptr) << "moved from";
  EXPECT_EQ(t.live.size(), 1u);
  moved.release();
  EXPECT_EQ(t.live.size(), 0u) << "the doomed registration went with its last lease";
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace eagercomm::test
