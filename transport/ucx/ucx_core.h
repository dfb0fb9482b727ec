// Pieces of the ucx backend that its files share: the UCP context and worker (UcxCore), the
// backend's regions and imported remotes, and how UCX statuses become eagercomm Statuses.
// Private to transport/ucx/.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/memory.h"
#include "runtime/status.h"
#include "transport/transport.h"
#include "transport/transport_log.h"

namespace eagercomm::ucx {

// True when the context may reach peers through shared memory (or when we cannot tell).
bool context_has_shared_memory(ucp_context_h context);

// The single place that maps eagercomm memory kinds to UCX memory types: CUDA memory goes to UCX
// as UCS_MEMORY_TYPE_CUDA when this UCX build handles it (ucx_memory_kind_supported()).
Result<ucs_memory_type_t> memory_type_of(MemoryKind kind, bool ucx_has_cuda);

StatusCode code_of(ucs_status_t s);

// Logs a UCX failure where it is first seen and builds the Status callers propagate.
Status ucx_failure(ucs_status_t s, const std::string& what);

// "UCX_TLS=<value>" for messages about unreachable peers.
std::string tls_hint();

// Memory ordering between plain stores into mapped peer memory and the notification that
// publishes them (and between the notification and the loads on the other side). UCX's own
// send and receive paths fence too; these keep the compiler and weakly ordered CPUs honest on
// our side of the call. gcc's TSan rejects atomic_thread_fence, and cannot see other
// processes' accesses anyway.
inline void fence(std::memory_order order) {
#if defined(__SANITIZE_THREAD__)
  (void)order;
  std::atomic_signal_fence(std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(order);
#endif
}

// The UCP context and worker. Shared by the transport, its regions and imported remotes:
// ucp_mem_unmap needs the context and ucp_rkey_destroy returns the key to the worker's pool,
// so both live until the last of them is gone.
struct UcxCore {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  bool cuda_memory = false;  // this UCX build handles UCS_MEMORY_TYPE_CUDA (ucp_context_query)
  // Memory UCX may still read after the transport released the requests using it (AM headers
  // of operations abandoned at a timed-out close); freed after the worker.
  std::vector<std::shared_ptr<void>> orphans;
  UcxCore() = default;
  UcxCore(const UcxCore&) = delete;
  UcxCore& operator=(const UcxCore&) = delete;
  ~UcxCore() {
    if (worker) ucp_worker_destroy(worker);
    if (context) ucp_cleanup(context);
  }
};

class UcxRegion final : public MemoryRegion {
 public:
  UcxRegion(std::shared_ptr<UcxCore> core, ucp_mem_h memh, void* data, size_t size, MemoryKind kind)
      : MemoryRegion(data, size, kind), core_(std::move(core)), memh_(memh) {}
  ~UcxRegion() override {
    const ucs_status_t s = ucp_mem_unmap(core_->context, memh_);
    if (s != UCS_OK)
      EC_WARN(kMem, "ucx: unmapping a region of %zu bytes failed: %s", size_, ucs_status_string(s));
  }
  const UcxCore* core() const { return core_.get(); }
  ucp_mem_h memh() const { return memh_; }
  void set_remote_key(std::vector<uint8_t> key) { remote_key_ = std::move(key); }

 private:
  std::shared_ptr<UcxCore> core_;
  ucp_mem_h memh_;
};

// memcpy for the few bytes of a latency-bound write without a call (memcpy's dispatch costs
// more than the copy there); larger copies go to memcpy.
inline void copy_small(uint8_t* to, const uint8_t* from, size_t n) {
  if (n >= 8 && n <= 16) {  // two words, overlapping unless n == 16
    uint64_t a, b;
    std::memcpy(&a, from, 8);
    std::memcpy(&b, from + n - 8, 8);
    std::memcpy(to, &a, 8);
    std::memcpy(to + n - 8, &b, 8);
  } else {
    std::memcpy(to, from, n);
  }
}

class UcxRemote final : public RemoteRegion {
 public:
  UcxRemote(std::shared_ptr<UcxCore> core, int peer, size_t size, ucp_rkey_h rkey, uint64_t base,
            void* mapped)
      : RemoteRegion(peer, size),
        core_(std::move(core)),
        rkey_(rkey),
        base_(base),
        mapped_(mapped) {}
  ~UcxRemote() override { ucp_rkey_destroy(rkey_); }
  const UcxCore* core() const { return core_.get(); }
  ucp_rkey_h rkey() const { return rkey_; }
  uint64_t base() const { return base_; }
  void* mapped() const { return mapped_; }

 private:
  std::shared_ptr<UcxCore> core_;
  ucp_rkey_h rkey_;
  uint64_t base_;
  void* mapped_;  // ucp_rkey_ptr's pointer when the peer's memory is mapped here, else nullptr
};

}  // namespace eagercomm::ucx
