// The emulated RDMA device (emu_verbs.h): verbs objects as handles over C++ state
// (emu_objects.h), one device thread per context. Here: the device, its contexts, protection
// domains, memory regions and fork protection, and the table that gathers every file's functions.
#include "transport/verbs/emulated/emu_verbs.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_cm.h"
#include "transport/verbs/emulated/emu_device_memory.h"
#include "transport/verbs/emulated/emu_objects.h"

namespace eagercomm::verbs::emu {
namespace {

// ibv_fork_init's state as rdma-core keeps it on a kernel without copy-on-fork for pinned pages
// (before 5.13): protection must be asked for before the first registration.
std::atomic<bool> fork_enabled{false};
std::atomic<bool> fork_too_late{false};           // a region was registered without it
std::atomic<uint32_t> default_max_msg{1u << 31};  // max_msg_sz of ports opened from now on

ibv_device* the_device() {
  static ibv_device device = [] {
    ibv_device d{};
    d.node_type = IBV_NODE_CA;
    d.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d.name, sizeof(d.name), "emu0");
    std::snprintf(d.dev_name, sizeof(d.dev_name), "uverbs-emu0");
    return d;
  }();
  return &device;
}

ibv_device** get_device_list(int* num) {
  // One list per call, freed by free_device_list.
  auto* list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) return nullptr;
  list[0] = the_device();
  if (num != nullptr) *num = 1;
  return list;
}
void free_device_list(ibv_device** list) { std::free(list); }
const char* get_device_name(ibv_device* d) { return d->name; }

ibv_context* open_device(ibv_device* d) {
  if (d != the_device()) {
    errno = ENODEV;
    return nullptr;
  }
  Result<std::unique_ptr<Port>> port = Port::create();
  if (!port.ok()) {
    EC_WARN(kNet, "%s", port.status().message().c_str());
    errno = ENOMEM;
    return nullptr;
  }
  auto ctx = std::make_unique<Context>();
  auto handle = std::make_unique<ContextHandle>();
  handle->impl = ctx.get();
  ibv_context& c = handle->base;
  c.device = d;
  c.ops.post_send = post_send;
  c.ops.post_recv = post_recv;
  c.ops.poll_cq = poll_cq;
  c.ops.req_notify_cq = req_notify_cq;
  c.cmd_fd = -1;
  c.async_fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | EFD_NONBLOCK);
  c.num_comp_vectors = 1;
  ctx->handle = &c;
  ctx->port = std::move(port.value());
  ctx->qps.assign(kMaxQps, nullptr);
  ctx->max_msg = default_max_msg.load();
  ctx->key_salt = std::random_device{}();
  Context* raw = ctx.get();
  // The device works for the rank whose transport opens it (the opener's log rank): its lines
  // carry that rank, as a NIC's errors belong to the process that owns the context.
  ctx->device = std::thread([raw, rank = log_thread_rank()] {
    log_set_thread_rank(rank);
    device_loop(*raw);
  });
  {
    std::lock_guard<std::mutex> lock(contexts_mu());
    contexts().push_back(raw);
  }
  ctx.release();  // owned by the handle from here on: close_device frees both
  return &handle.release()->base;
}

int close_device(ibv_context* c) {
  std::unique_ptr<ContextHandle> handle(reinterpret_cast<ContextHandle*>(c));
  std::unique_ptr<Context> ctx(handle->impl);
  {
    std::lock_guard<std::mutex> lock(contexts_mu());
    std::erase(contexts(), ctx.get());
  }
  ctx->stop.store(true, std::memory_order_release);
  ctx->port->ring_doorbell();
  ctx->device.join();
  close(c->async_fd);
  return 0;
}

int query_device(ibv_context* c, ibv_device_attr* a) {
  (void)c;
  *a = ibv_device_attr{};
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "eagercomm-emulated");
  a->max_mr_size = uint64_t{1} << 40;
  a->max_qp = kMaxQps;
  a->max_qp_wr = kMaxWr;
  a->max_sge = 1;
  a->max_cq = 1024;
  a->max_cqe = kMaxCqe;
  a->max_mr = kMaxMrs;
  a->max_pd = 1024;
  a->phys_port_cnt = 1;
  return 0;
}

int query_port(ibv_context* c, uint8_t port, _compat_ibv_port_attr* compat) {
  if (port != 1) return EINVAL;
  auto* a = reinterpret_cast<ibv_port_attr*>(compat);
  Context& ctx = *ctx_of(c);
  std::lock_guard<std::mutex> lock(ctx.mu);
  a->state = ctx.port_down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->max_msg_sz = ctx.max_msg;
  a->pkey_tbl_len = 1;
  a->lid = static_cast<uint16_t>(ctx.port->lid());
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  a->active_width = 2;                    // 4x
  a->active_speed = 32;                   // HDR-like; only informative
  a->phys_state = ctx.port_down ? 3 : 5;  // Disabled, LinkUp
  return 0;
}

int query_gid_ex(ibv_context* c, uint32_t port, uint32_t index, ibv_gid_entry* e, uint32_t flags,
                 size_t size) {
  (void)flags;
  if (port != 1 || index != 0 || size < sizeof(ibv_gid_entry)) return EINVAL;
  *e = ibv_gid_entry{};
  e->gid.raw[0] = 0xfe;
  e->gid.raw[1] = 0x80;
  const uint32_t lid = ctx_of(c)->port->lid();
  e->gid.raw[14] = static_cast<uint8_t>(lid >> 8);
  e->gid.raw[15] = static_cast<uint8_t>(lid);
  e->gid_index = 0;
  e->port_num = 1;
  e->gid_type = IBV_GID_TYPE_IB;
  return 0;
}

ibv_pd* alloc_pd(ibv_context* c) {
  auto pd = std::make_unique<ibv_pd>();  // a domain holds nothing here: regions name the context
  pd->context = c;
  return pd.release();
}
int dealloc_pd(ibv_pd* pd) {
  std::unique_ptr<ibv_pd> owned(pd);
  return 0;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  Context& ctx = *ctx_of(pd->context);
  if (!fork_enabled.load()) fork_too_late.store(true);
  std::lock_guard<std::mutex> lock(ctx.mu);
  PortShared& s = ctx.port->shared();
  for (uint32_t i = 0; i < kMaxMrs; ++i) {
    MrSlot& m = s.mrs[i];
    if (m.rkey.load(std::memory_order_relaxed) != 0) continue;
    const uint32_t key = ((ctx.key_salt++ & 0x7fff) + 1) << 16 | (i + 1);
    m.access = static_cast<uint32_t>(access);
    m.addr = reinterpret_cast<uintptr_t>(addr);
    m.length = length;
    m.device = device_address(m.addr, length);
    m.rkey.store(key, std::memory_order_release);
    auto mr = std::make_unique<ibv_mr>();  // the slot index is its handle
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    mr->lkey = key;
    mr->rkey = key;
    mr->handle = i;
    return mr.release();
  }
  errno = ENOMEM;
  return nullptr;
}

int dereg_mr(ibv_mr* mr) {
  std::unique_ptr<ibv_mr> owned(mr);
  Context& ctx = *ctx_of(mr->context);
  std::lock_guard<std::mutex> lock(ctx.mu);
  ctx.port->shared().mrs[mr->handle].rkey.store(0, std::memory_order_release);
  return 0;
}

// rdma-core's rules: enabling after a registration is refused (the pages already pinned could not
// be protected); enabling twice is fine.
int fork_init() {
  if (fork_enabled.load()) return 0;
  if (fork_too_late.load()) return EINVAL;
  fork_enabled.store(true);
  return 0;
}
ibv_fork_status is_fork_initialized() {
  return fork_enabled.load() ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

void fill_device_table(VerbsApi& a) {
  a.get_device_list = get_device_list;
  a.free_device_list = free_device_list;
  a.get_device_name = get_device_name;
  a.open_device = open_device;
  a.close_device = close_device;
  a.query_device = query_device;
  a.query_port_compat = query_port;
  a.query_gid_ex_sized = query_gid_ex;
  a.alloc_pd = alloc_pd;
  a.dealloc_pd = dealloc_pd;
  a.reg_mr = reg_mr;
  a.dereg_mr = dereg_mr;
  a.fork_init = fork_init;
  a.is_fork_initialized = is_fork_initialized;
  a.is_device_memory = is_device_memory;
}

}  // namespace

std::mutex& contexts_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<Context*>& contexts() {
  static std::vector<Context*> v;
  return v;
}

void set_max_message(uint32_t bytes) { default_max_msg.store(bytes); }

void reset_fork_state() {
  fork_enabled.store(false);
  fork_too_late.store(false);
}

}  // namespace eagercomm::verbs::emu

namespace eagercomm::verbs {

const VerbsApi& emulated_verbs_api() {
  static const VerbsApi api = [] {
    VerbsApi a;
    a.source = "emulated";
    emu::fill_device_table(a);
    emu::fill_completion_table(a);
    emu::fill_qp_table(a);
    emu::fill_cm_table(a);
    return a;
  }();
  return api;
}

}  // namespace eagercomm::verbs
