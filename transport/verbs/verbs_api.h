// Internal: libibverbs and librdmacm, reached through one table of functions loaded at run time.
// Not installed.
//
// libeagercomm.so does not link against rdma-core: it loads libibverbs.so.1 (and librdmacm.so.1,
// optional) with dlopen the first time a verbs transport or device listing needs them, as NCCL's
// ibvwrap does. So the library loads, and every other backend works, on machines without
// rdma-core, and the device underneath can be substituted (the emulated device takes this
// table's place; a test can hand the transport its own).
//
// The table holds the functions rdma-core exports. The data-path calls of <infiniband/verbs.h>
// (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are inline functions that
// dispatch through the context's provider operations, so they need no entry here. Some header
// names are macros or inline wrappers over an exported function with another name or signature
// (ibv_query_port over the compat ibv_query_port, ibv_query_gid_ex over _ibv_query_gid_ex): the
// table holds the exported function and query_port() / query_gid_ex() below do what the header's
// wrappers do.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/status.h"

namespace eagercomm::verbs {

struct VerbsApi {
  std::string source;  // where the functions come from: "libibverbs.so.1", "emulated", ...

  // libibverbs (required)
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  // The exported ibv_query_port; call query_port() below.
  int (*query_port_compat)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;
  // The exported _ibv_query_gid_ex; call query_gid_ex() below.
  int (*query_gid_ex_sized)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t,
                            size_t) = nullptr;
  decltype(&::ibv_alloc_pd) alloc_pd = nullptr;
  decltype(&::ibv_dealloc_pd) dealloc_pd = nullptr;
  decltype(&::ibv_reg_mr) reg_mr = nullptr;
  decltype(&::ibv_dereg_mr) dereg_mr = nullptr;
  decltype(&::ibv_create_comp_channel) create_comp_channel = nullptr;
  decltype(&::ibv_destroy_comp_channel) destroy_comp_channel = nullptr;
  decltype(&::ibv_create_cq) create_cq = nullptr;
  decltype(&::ibv_destroy_cq) destroy_cq = nullptr;
  decltype(&::ibv_get_cq_event) get_cq_event = nullptr;
  decltype(&::ibv_ack_cq_events) ack_cq_events = nullptr;
  decltype(&::ibv_create_qp) create_qp = nullptr;
  decltype(&::ibv_modify_qp) modify_qp = nullptr;
  decltype(&::ibv_destroy_qp) destroy_qp = nullptr;
  decltype(&::ibv_get_async_event) get_async_event = nullptr;
  decltype(&::ibv_ack_async_event) ack_async_event = nullptr;
  decltype(&::ibv_wc_status_str) wc_status_str = nullptr;
  decltype(&::ibv_event_type_str) event_type_str = nullptr;
  decltype(&::ibv_fork_init) fork_init = nullptr;
  // libibverbs (optional: older rdma-core lacks them; nullptr then)
  decltype(&::ibv_reg_dmabuf_mr) reg_dmabuf_mr = nullptr;
  decltype(&::ibv_is_fork_initialized) is_fork_initialized = nullptr;
  // The emulated device only: whether a range is its device memory, which the transport then
  // registers as GPU memory the NIC reaches directly (emulated/emu_device_memory.h).
  bool (*is_device_memory)(const void* addr, size_t length) = nullptr;

  // librdmacm (optional as a whole: without it queue pairs connect through the store only)
  bool has_cm = false;
  std::string cm_missing;       // why has_cm is false
  bool cm_on_loopback = false;  // the device's rdma_cm address is the loopback one (emulated)
  decltype(&::rdma_create_event_channel) create_event_channel = nullptr;
  decltype(&::rdma_destroy_event_channel) destroy_event_channel = nullptr;
  decltype(&::rdma_create_id) create_id = nullptr;
  decltype(&::rdma_destroy_id) destroy_id = nullptr;
  decltype(&::rdma_bind_addr) bind_addr = nullptr;
  decltype(&::rdma_resolve_addr) resolve_addr = nullptr;
  decltype(&::rdma_resolve_route) resolve_route = nullptr;
  decltype(&::rdma_listen) listen = nullptr;
  decltype(&::rdma_connect) connect = nullptr;
  decltype(&::rdma_accept) accept = nullptr;
  decltype(&::rdma_reject) reject = nullptr;
  decltype(&::rdma_establish) establish = nullptr;
  decltype(&::rdma_disconnect) disconnect = nullptr;
  decltype(&::rdma_get_cm_event) get_cm_event = nullptr;
  decltype(&::rdma_ack_cm_event) ack_cm_event = nullptr;
  decltype(&::rdma_event_str) event_str = nullptr;
  decltype(&::rdma_init_qp_attr) init_qp_attr = nullptr;
  decltype(&::rdma_get_src_port) get_src_port = nullptr;

  // <infiniband/verbs.h>'s ibv_query_port(): the full attributes (the exported function fills
  // the provider's whole struct; the header's wrapper casts the same way).
  int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
  // <infiniband/verbs.h>'s ibv_query_gid_ex().
  int query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                   uint32_t flags) const;
};

// Fork protection (ibv_fork_init), which must precede the first registration: without it, on
// kernels before 5.13, a child forked after memory was registered (a PyTorch DataLoader worker)
// makes the parent's registered pages copy-on-write and the NIC then reads and writes pages the
// parent no longer uses: silent corruption.
enum class ForkProtection {
  kUnneeded,  // the kernel keeps registered pages with the parent (copy-on-fork, 5.13+)
  kEnabled,   // enabled (by us now, or earlier by the application or RDMAV_FORK_SAFE)
  kFailed,    // needed and refused: a region was registered before (see `why`)
};
struct ForkProtectionResult {
  ForkProtection state;
  std::string why;  // kFailed: the cause and what to do
};
// Enables it where needed (ibv_is_fork_initialized; rdma-core without that function: always
// asked for). Idempotent.
ForkProtectionResult enable_fork_protection(const VerbsApi& api);

// Loads the named libraries (sonames or paths) and resolves every function. kUnavailable naming
// the library and dlerror()'s text when the required one cannot be loaded, or naming the first
// required function it lacks; a librdmacm that cannot be loaded only clears has_cm. The handles
// stay open for the life of the process (the functions' addresses are kept).
Result<VerbsApi> load_verbs_api(const char* ibverbs_library, const char* rdmacm_library);

// The system's rdma-core (libibverbs.so.1, librdmacm.so.1), loaded once per process and logged
// once; later calls return the same table or the same error.
Result<const VerbsApi*> system_verbs_api();

// strerror(errno): the cause a failed rdma-core call left there.
inline std::string errno_text() { return std::strerror(errno); }

}  // namespace eagercomm::verbs
