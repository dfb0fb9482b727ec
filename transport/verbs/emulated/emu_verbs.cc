// The emulated RDMA device (emu_verbs.h): verbs objects as handles over C++ state, one device
// thread per context.
#include "transport/verbs/emulated/emu_verbs.h"

#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_cm.h"
#include "transport/verbs/emulated/emu_device_memory.h"
#include "transport/verbs/emulated/emu_port.h"

namespace eagercomm::verbs {
namespace {

using Clock = std::chrono::steady_clock;
using emu::Packet;
using emu::Port;
using emu::PortShared;

constexpr uint32_t kMaxInline = 256;
constexpr uint32_t kMaxWr = 4096;
constexpr int kMaxCqe = 1 << 20;

struct Context;
struct Cq;
struct Qp;

// A verbs object as the application sees it, and the emulator's state behind it. Standard layout,
// so a pointer to `base` is a pointer to the handle.
template <typename Base, typename Impl>
struct Handle {
  Base base;
  Impl* impl;
};

struct Channel {
  ibv_comp_channel* handle = nullptr;
  std::mutex mu;
  std::deque<ibv_cq*> events;
};
using ChannelHandle = Handle<ibv_comp_channel, Channel>;

struct Cq {
  ibv_cq* handle = nullptr;
  Channel* channel = nullptr;
  Context* ctx = nullptr;
  std::mutex mu;
  std::deque<ibv_wc> wcs;
  int capacity = 0;
  bool armed = false;
  bool overrun = false;
};
using CqHandle = Handle<ibv_cq, Cq>;

struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  uint32_t imm = 0;
  uint64_t local_addr = 0;
  uint32_t lkey = 0;
  uint32_t length = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  bool inlined = false;
  std::vector<uint8_t> inline_data;
  // progress of its execution
  uint32_t sent = 0;
  bool reserved = false;  // holds a receive of the responder (WRITE_WITH_IMM)
  bool delayed = false;   // an injected delay was applied
  int retries = 0;
  int rnr_retries = 0;
  Clock::time_point not_before{};
};

struct Qp {
  ibv_qp* handle = nullptr;
  Context* ctx = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  uint32_t slot = 0;
  uint32_t max_send = 0;
  uint32_t max_recv = 0;
  uint32_t max_inline = 0;
  // attributes (modify_qp)
  std::atomic<int> state{IBV_QPS_RESET};  // read by posting threads, set by both sides
  uint32_t access = 0;
  uint32_t dlid = 0;
  uint32_t dqpn = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint8_t sl = 0;
  uint8_t traffic_class = 0;
  uint8_t path_mtu = 0;  // ibv_mtu
  uint16_t pkey_index = 0;
  std::atomic<uint64_t> send_completions{0};  // generated on send_cq (qp_attributes())
  // scripted faults (inject_*): packets still to lose, latency added to each request
  uint32_t drop = 0;
  Clock::duration delay{};
  std::mutex mu;  // sq, rq (posting threads and the device thread)
  std::deque<SendWqe> sq;
  std::deque<uint64_t> rq;
};
using QpHandle = Handle<ibv_qp, Qp>;

struct Context {
  ibv_context* handle = nullptr;
  std::unique_ptr<Port> port;
  std::mutex mu;         // everything below; held by the device thread for a whole pass
  std::vector<Qp*> qps;  // by slot
  std::unordered_map<uint32_t, std::unique_ptr<Port>> remotes;  // by LID
  std::mutex async_mu;                                          // async_events (any thread)
  std::deque<ibv_async_event> async_events;
  uint32_t key_salt = 1;   // random per context: a reused port does not hand out the same keys
  bool port_down = false;  // set_port_down(): nothing sent or placed
  uint32_t max_msg = 0;    // the port's max_msg_sz (set_max_message())
  std::atomic<bool> stop{false};
  std::thread device;
};
using ContextHandle = Handle<ibv_context, Context>;

static_assert(std::is_standard_layout_v<QpHandle> && std::is_standard_layout_v<CqHandle> &&
              std::is_standard_layout_v<ContextHandle> && std::is_standard_layout_v<ChannelHandle>);

// A QP number carries its port's LID (so rdma_cm, given only a number, knows the port): the LID
// above the low 10 bits, the slot + 1 in them.
static_assert(emu::kMaxQps == 1024 && emu::kMaxLid <= 4096);
uint32_t qpn_of(uint32_t lid, uint32_t slot) { return lid << 10 | (slot + 1); }
uint32_t slot_of(uint32_t qpn) { return (qpn & 0x3ff) - 1; }
uint32_t lid_of(uint32_t qpn) { return qpn >> 10; }

template <typename H, typename B>
auto impl_of(B* base) {
  return reinterpret_cast<H*>(base)->impl;
}
Context* ctx_of(ibv_context* c) { return impl_of<ContextHandle>(c); }
Qp* qp_of(ibv_qp* q) { return impl_of<QpHandle>(q); }
Cq* cq_of(ibv_cq* c) { return impl_of<CqHandle>(c); }
Channel* channel_of(ibv_comp_channel* c) { return impl_of<ChannelHandle>(c); }

const char* wc_status_str(ibv_wc_status status);

// This process's open contexts, where the scripted faults (emu_verbs.h) find their targets.
// Lock order: contexts_mu, then a context's mu.
std::mutex& contexts_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<Context*>& contexts() {
  static std::vector<Context*> v;
  return v;
}

// ibv_fork_init's state as rdma-core keeps it on a kernel without copy-on-fork for pinned pages
// (before 5.13): protection must be asked for before the first registration.
std::atomic<bool> fork_enabled{false};
std::atomic<bool> fork_too_late{false};           // a region was registered without it
std::atomic<uint32_t> default_max_msg{1u << 31};  // max_msg_sz of ports opened from now on

void signal_fd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof(one));
}

void push_async(Context& ctx, ibv_async_event event) {
  std::lock_guard<std::mutex> lock(ctx.async_mu);
  ctx.async_events.push_back(event);
  signal_fd(ctx.handle->async_fd);
}

// Adds a completion; an overrun drops it and reports the CQ in error (as hardware does).
void complete(Cq& cq, const ibv_wc& wc) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(cq.mu);
    if (static_cast<int>(cq.wcs.size()) >= cq.capacity) {
      if (!cq.overrun) {
        cq.overrun = true;
        EC_WARN(kNet, "emulated verbs: CQ overrun (%d entries): completions are lost", cq.capacity);
        ibv_async_event e{};
        e.element.cq = cq.handle;
        e.event_type = IBV_EVENT_CQ_ERR;
        push_async(*cq.ctx, e);
      }
      return;
    }
    cq.wcs.push_back(wc);
    notify = cq.armed && cq.channel != nullptr;
    if (notify) cq.armed = false;
  }
  if (notify) {
    std::lock_guard<std::mutex> lock(cq.channel->mu);
    cq.channel->events.push_back(cq.handle);
    signal_fd(cq.channel->handle->fd);
  }
}

ibv_wc make_wc(const Qp& qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode);

// A send request's completion (counted: tests check how many the transport asks for).
void complete_send(Qp& qp, uint64_t wr_id, ibv_wc_status status) {
  qp.send_completions.fetch_add(1, std::memory_order_relaxed);
  complete(*qp.send_cq, make_wc(qp, wr_id, status, IBV_WC_RDMA_WRITE));
}

ibv_wc make_wc(const Qp& qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.qp_num = qp.handle->qp_num;
  return wc;
}

void set_state(Qp& qp, ibv_qp_state state) {
  qp.state = state;
  qp.handle->state = state;
  qp.ctx->port->shared().qps[qp.slot].state.store(state, std::memory_order_release);
}

// Moves `qp` to ERROR: every outstanding request completes with IBV_WC_WR_FLUSH_ERR.
void enter_error(Qp& qp) {
  set_state(qp, IBV_QPS_ERR);
  std::deque<SendWqe> sq;
  std::deque<uint64_t> rq;
  {
    std::lock_guard<std::mutex> lock(qp.mu);
    sq.swap(qp.sq);
    rq.swap(qp.rq);
  }
  for (const SendWqe& w : sq) {
    complete_send(qp, w.wr_id, IBV_WC_WR_FLUSH_ERR);
  }
  for (uint64_t wr_id : rq) {
    complete(*qp.recv_cq, make_wc(qp, wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
  }
}

// The head request failed: it completes with `status` (errors complete even unsignaled) and the
// QP enters ERROR. As on hardware, the completion is the report: no async event.
void fail_head(Qp& qp, ibv_wc_status status) {
  SendWqe w;
  {
    std::lock_guard<std::mutex> lock(qp.mu);
    w = std::move(qp.sq.front());
    qp.sq.pop_front();
  }
  EC_DEBUG(kNet, "emulated verbs: QP %u: %s", qp.handle->qp_num, wc_status_str(status));
  complete_send(qp, w.wr_id, status);
  enter_error(qp);
}

Clock::duration ack_timeout(uint8_t timeout) {
  // 4.096 us x 2^timeout; 0 means "infinite" in IB: retried every second here.
  if (timeout == 0) return std::chrono::seconds(1);
  return std::chrono::nanoseconds(static_cast<int64_t>(4096) << std::min<uint8_t>(timeout, 31));
}

Clock::duration rnr_delay(uint32_t code) {
  // IB's table of RNR NAK timer values (microseconds), code 0 = 655.36 ms.
  static constexpr uint32_t kMicros[32] = {
      655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
      480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::chrono::microseconds(kMicros[code & 31]);
}

const emu::MrSlot* find_mr(const PortShared& port, uint32_t key) {
  const uint32_t slot = (key & 0xffff) - 1;
  if (slot >= emu::kMaxMrs) return nullptr;
  const emu::MrSlot& m = port.mrs[slot];
  return m.rkey.load(std::memory_order_acquire) == key ? &m : nullptr;
}

bool in_region(const emu::MrSlot& m, uint64_t addr, uint64_t length) {
  return addr >= m.addr && length <= m.length && addr - m.addr <= m.length - length;
}

Port* remote_port(Context& ctx, uint32_t lid) {
  if (lid == ctx.port->lid()) return ctx.port.get();
  auto it = ctx.remotes.find(lid);
  if (it != ctx.remotes.end() && it->second->alive()) return it->second.get();
  if (it != ctx.remotes.end()) ctx.remotes.erase(it);
  Result<std::unique_ptr<Port>> p = Port::attach(lid);
  if (!p.ok()) return nullptr;
  return (ctx.remotes[lid] = std::move(p.value())).get();
}

// Executes as much of `qp`'s head request as it can now. True if it did something.
bool run_head(Context& ctx, Qp& qp, Clock::time_point now, Clock::time_point* next_due) {
  SendWqe* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(qp.mu);
    if (qp.sq.empty()) return false;
    w = &qp.sq.front();  // only this thread pops; posters append (deque keeps references)
  }
  if (now < w->not_before) {
    *next_due = std::min(*next_due, w->not_before);
    return false;
  }
  // The packet is lost when nobody receives it: the requester times out and retries.
  auto dropped = [&] {
    if (++w->retries > qp.retry_cnt) {
      fail_head(qp, IBV_WC_RETRY_EXC_ERR);
    } else {
      w->not_before = now + ack_timeout(qp.timeout);
      *next_due = std::min(*next_due, w->not_before);
    }
    return true;
  };
  if (ctx.port_down) return dropped();
  if (qp.delay > Clock::duration::zero() && !w->delayed && w->sent == 0) {
    w->delayed = true;
    w->not_before = now + qp.delay;
    *next_due = std::min(*next_due, w->not_before);
    return false;
  }
  if (qp.drop > 0) {  // lost on the wire (inject_drop)
    --qp.drop;
    return dropped();
  }
  if (w->length > ctx.max_msg) {
    fail_head(qp, IBV_WC_LOC_LEN_ERR);
    return true;
  }
  Port* remote = remote_port(ctx, qp.dlid);
  if (remote == nullptr) return dropped();
  PortShared& rs = remote->shared();
  const uint32_t rslot = slot_of(qp.dqpn);
  if (rslot >= emu::kMaxQps || lid_of(qp.dqpn) != qp.dlid) return dropped();
  emu::QpSlot& rq = rs.qps[rslot];
  const uint32_t rstate = rq.state.load(std::memory_order_acquire);
  if (rstate != IBV_QPS_RTR && rstate != IBV_QPS_RTS) return dropped();
  if (rq.peer_lid.load(std::memory_order_relaxed) != ctx.port->lid() ||
      rq.peer_qpn.load(std::memory_order_relaxed) != qp.handle->qp_num) {
    return dropped();  // that QP is connected to another requester (a reused LID or QP number)
  }
  // Protection, checked as the responder would (its tables are shared memory).
  const emu::MrSlot* target = find_mr(rs, w->rkey);
  if (target == nullptr || !(target->access & IBV_ACCESS_REMOTE_WRITE) ||
      !in_region(*target, w->remote_addr, w->length)) {
    fail_head(qp, IBV_WC_REM_ACCESS_ERR);
    return true;
  }
  const uint8_t* source = w->inline_data.data();
  if (!w->inlined && w->length > 0) {
    const emu::MrSlot* local = find_mr(ctx.port->shared(), w->lkey);
    if (local == nullptr || !in_region(*local, w->local_addr, w->length)) {
      fail_head(qp, IBV_WC_LOC_PROT_ERR);
      return true;
    }
    source = reinterpret_cast<const uint8_t*>(local->device + (w->local_addr - local->addr));
  }
  const bool with_imm = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (with_imm && !w->reserved) {
    uint32_t reserved = rq.recv_reserved.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t posted = rq.recv_posted.load(std::memory_order_acquire);
      if (posted == reserved) {  // RNR NAK
        if (qp.rnr_retry != 7 && ++w->rnr_retries > qp.rnr_retry) {
          fail_head(qp, IBV_WC_RNR_RETRY_EXC_ERR);
          return true;
        }
        w->not_before = now + rnr_delay(rq.min_rnr_timer.load(std::memory_order_relaxed));
        *next_due = std::min(*next_due, w->not_before);
        return true;
      }
      if (rq.recv_reserved.compare_exchange_weak(reserved, reserved + 1,
                                                 std::memory_order_acq_rel)) {
        break;
      }
    }
    w->reserved = true;
  }
  bool pushed = false;
  do {
    const uint32_t len = std::min(w->length - w->sent, emu::kChunk);
    const bool last = w->sent + len == w->length;
    const bool ok = remote->push([&](Packet& p) {
      p.kind = emu::PacketKind::kWrite;
      p.flags = (last ? emu::kPacketLast : 0) | (last && with_imm ? emu::kPacketWithImm : 0);
      p.src_lid = ctx.port->lid();
      p.src_qpn = qp.handle->qp_num;
      p.dst_qpn = qp.dqpn;
      p.rkey = w->rkey;
      p.imm = w->imm;
      p.len = len;
      p.total = w->length;
      p.addr = w->remote_addr + w->sent;
      if (len > 0) std::memcpy(p.data, source + w->sent, len);
    });
    if (!ok) break;  // the responder's ring is full: resume on a later pass
    pushed = true;
    w->sent += len;
    if (last) {
      remote->ring_doorbell();
      SendWqe done;
      {
        std::lock_guard<std::mutex> lock(qp.mu);
        done = std::move(qp.sq.front());
        qp.sq.pop_front();
      }
      if (done.signaled) {
        complete_send(qp, done.wr_id, IBV_WC_SUCCESS);
      }
      return true;
    }
  } while (true);
  if (pushed) remote->ring_doorbell();
  return pushed;
}

// Places one inbound packet.
void place(Context& ctx, const Packet& p) {
  if (ctx.port_down) return;             // lost: the requester retries
  if (p.kind == emu::PacketKind::kCm) {  // a disconnect request, behind the data (emu_cm.h)
    emu::deliver_cm_packet(p.data, p.len);
    return;
  }
  const uint32_t slot = slot_of(p.dst_qpn);
  if (slot >= ctx.qps.size() || ctx.qps[slot] == nullptr || lid_of(p.dst_qpn) != ctx.port->lid()) {
    return;  // no such QP: dropped
  }
  Qp& qp = *ctx.qps[slot];
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS) return;
  if (p.src_lid != qp.dlid || p.src_qpn != qp.dqpn) return;  // not from our requester
  const emu::MrSlot* mr = find_mr(ctx.port->shared(), p.rkey);
  if (mr != nullptr && p.len > 0 && in_region(*mr, p.addr, p.len)) {
    void* to = reinterpret_cast<void*>(mr->device + (p.addr - mr->addr));
    if (p.len == 8 && reinterpret_cast<uintptr_t>(to) % 8 == 0) {
      // An aligned 8-byte write lands whole, as a NIC's does: peers poll such words (credits)
      // without a completion.
      uint64_t word;
      std::memcpy(&word, p.data, 8);
      __atomic_store_n(static_cast<uint64_t*>(to), word, __ATOMIC_RELEASE);
    } else {
      std::memcpy(to, p.data, p.len);
    }
  }
  if (!(p.flags & emu::kPacketWithImm)) return;
  uint64_t wr_id = 0;
  {
    std::lock_guard<std::mutex> lock(qp.mu);
    if (qp.rq.empty()) return;  // cannot happen: the requester reserved one
    wr_id = qp.rq.front();
    qp.rq.pop_front();
  }
  ibv_wc wc = make_wc(qp, wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.imm_data = p.imm;
  wc.byte_len = p.total;
  wc.src_qp = p.src_qpn;
  wc.slid = static_cast<uint16_t>(p.src_lid);
  complete(*qp.recv_cq, wc);
}

void device_loop(Context& ctx) {
  PortShared& own = ctx.port->shared();
  while (!ctx.stop.load(std::memory_order_acquire)) {
    const uint32_t bell = own.doorbell.load(std::memory_order_acquire);
    bool busy = false;
    Clock::time_point next_due = Clock::time_point::max();
    {
      std::lock_guard<std::mutex> lock(ctx.mu);
      for (int n = 0; n < 64; ++n) {
        const Packet* p = ctx.port->peek();
        if (p == nullptr) break;
        place(ctx, *p);
        ctx.port->release();
        busy = true;
      }
      const Clock::time_point now = Clock::now();
      for (Qp* qp : ctx.qps) {
        if (qp == nullptr || qp->state != IBV_QPS_RTS) continue;
        busy |= run_head(ctx, *qp, now, &next_due);
      }
    }
    if (busy) continue;
    // Sleep until a doorbell, the next retry, or 1 ms (a peer's ring may have room again).
    auto wait = std::chrono::nanoseconds(std::chrono::milliseconds(1));
    if (next_due != Clock::time_point::max()) {
      wait = std::min(
          wait, std::chrono::duration_cast<std::chrono::nanoseconds>(next_due - Clock::now()));
    }
    if (wait <= std::chrono::nanoseconds(0)) continue;
    timespec ts{0, static_cast<long>(wait.count())};
    own.sleeping.store(1, std::memory_order_seq_cst);
    if (own.doorbell.load(std::memory_order_seq_cst) == bell) {
      syscall(SYS_futex, &own.doorbell, FUTEX_WAIT, bell, &ts, nullptr, 0);
    }
    own.sleeping.store(0, std::memory_order_relaxed);
  }
}

// ---- the table's functions ----

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

int post_send(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad);
int post_recv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad);
int poll_cq(ibv_cq* c, int n, ibv_wc* out);
int req_notify_cq(ibv_cq* c, int solicited_only);

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
  ctx->qps.assign(emu::kMaxQps, nullptr);
  ctx->max_msg = default_max_msg.load();
  ctx->key_salt = std::random_device{}();
  Context* raw = ctx.get();
  ctx->device = std::thread([raw] { device_loop(*raw); });
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
  a->max_qp = emu::kMaxQps;
  a->max_qp_wr = kMaxWr;
  a->max_sge = 1;
  a->max_cq = 1024;
  a->max_cqe = kMaxCqe;
  a->max_mr = emu::kMaxMrs;
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
  for (uint32_t i = 0; i < emu::kMaxMrs; ++i) {
    emu::MrSlot& m = s.mrs[i];
    if (m.rkey.load(std::memory_order_relaxed) != 0) continue;
    const uint32_t key = ((ctx.key_salt++ & 0x7fff) + 1) << 16 | (i + 1);
    m.access = static_cast<uint32_t>(access);
    m.addr = reinterpret_cast<uintptr_t>(addr);
    m.length = length;
    m.device = emu::device_address(m.addr, length);
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

ibv_comp_channel* create_comp_channel(ibv_context* c) {
  const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto ch = std::make_unique<Channel>();
  auto handle = std::make_unique<ChannelHandle>();
  handle->impl = ch.get();
  handle->base.context = c;
  handle->base.fd = fd;
  ch->handle = &handle->base;
  ch.release();
  return &handle.release()->base;
}
int destroy_comp_channel(ibv_comp_channel* ch) {
  std::unique_ptr<ChannelHandle> handle(reinterpret_cast<ChannelHandle*>(ch));
  std::unique_ptr<Channel> impl(handle->impl);
  close(ch->fd);
  return 0;
}

ibv_cq* create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* channel,
                  int comp_vector) {
  (void)comp_vector;
  if (cqe < 1 || cqe > kMaxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  auto cq = std::make_unique<Cq>();
  auto handle = std::make_unique<CqHandle>();
  handle->impl = cq.get();
  handle->base.context = c;
  handle->base.channel = channel;
  handle->base.cq_context = cq_context;
  handle->base.cqe = cqe;
  cq->handle = &handle->base;
  cq->ctx = ctx_of(c);
  cq->channel = channel != nullptr ? channel_of(channel) : nullptr;
  cq->capacity = cqe;
  cq.release();
  return &handle.release()->base;
}
int destroy_cq(ibv_cq* c) {
  std::unique_ptr<CqHandle> handle(reinterpret_cast<CqHandle*>(c));
  std::unique_ptr<Cq> impl(handle->impl);
  return 0;
}

int get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  uint64_t v = 0;
  if (read(ch->fd, &v, sizeof(v)) != sizeof(v)) return -1;  // errno from read (EAGAIN)
  Channel& c = *channel_of(ch);
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *cq = c.events.front();
  c.events.pop_front();
  *cq_context = (*cq)->cq_context;
  return 0;
}
void ack_cq_events(ibv_cq* cq, unsigned int n) {
  std::lock_guard<std::mutex> lock(cq_of(cq)->mu);  // any thread may wait on the channel
  cq->comp_events_completed += n;
}

int poll_cq(ibv_cq* c, int n, ibv_wc* out) {
  Cq& cq = *cq_of(c);
  std::lock_guard<std::mutex> lock(cq.mu);
  if (cq.overrun) return -1;  // a CQ in error
  int got = 0;
  while (got < n && !cq.wcs.empty()) {
    out[got++] = cq.wcs.front();
    cq.wcs.pop_front();
  }
  return got;
}

int req_notify_cq(ibv_cq* c, int solicited_only) {
  (void)solicited_only;
  Cq& cq = *cq_of(c);
  std::lock_guard<std::mutex> lock(cq.mu);
  cq.armed = true;
  return 0;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* ia) {
  Context& ctx = *ctx_of(pd->context);
  if (ia->qp_type != IBV_QPT_RC || ia->send_cq == nullptr || ia->recv_cq == nullptr ||
      ia->srq != nullptr || ia->cap.max_send_wr > kMaxWr || ia->cap.max_recv_wr > kMaxWr ||
      ia->cap.max_send_sge > 1 || ia->cap.max_recv_sge > 1 ||
      ia->cap.max_inline_data > kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(ctx.mu);
  PortShared& s = ctx.port->shared();
  for (uint32_t i = 0; i < emu::kMaxQps; ++i) {
    if (ctx.qps[i] != nullptr) continue;
    auto qp = std::make_unique<Qp>();
    auto handle = std::make_unique<QpHandle>();
    handle->impl = qp.get();
    ibv_qp& b = handle->base;
    b.context = pd->context;
    b.qp_context = ia->qp_context;
    b.pd = pd;
    b.send_cq = ia->send_cq;
    b.recv_cq = ia->recv_cq;
    b.handle = i;
    b.qp_num = qpn_of(ctx.port->lid(), i);
    b.state = IBV_QPS_RESET;
    b.qp_type = IBV_QPT_RC;
    qp->handle = &b;
    qp->ctx = &ctx;
    qp->send_cq = cq_of(ia->send_cq);
    qp->recv_cq = cq_of(ia->recv_cq);
    qp->slot = i;
    qp->max_send = std::max<uint32_t>(1, ia->cap.max_send_wr);
    qp->max_recv = std::max<uint32_t>(1, ia->cap.max_recv_wr);
    qp->max_inline = ia->cap.max_inline_data;
    emu::QpSlot& slot = s.qps[i];
    slot.recv_posted.store(0, std::memory_order_relaxed);
    slot.recv_reserved.store(0, std::memory_order_relaxed);
    slot.min_rnr_timer.store(0, std::memory_order_relaxed);
    slot.peer_lid.store(0, std::memory_order_relaxed);
    slot.peer_qpn.store(0, std::memory_order_relaxed);
    slot.state.store(IBV_QPS_RESET, std::memory_order_release);
    ctx.qps[i] = qp.release();
    return &handle.release()->base;
  }
  errno = ENOMEM;
  return nullptr;
}

int modify_qp(ibv_qp* q, ibv_qp_attr* a, int mask) {
  Qp& qp = *qp_of(q);
  std::lock_guard<std::mutex> lock(qp.ctx->mu);
  const auto from = static_cast<ibv_qp_state>(qp.state.load());
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? a->qp_state : from;
  auto needs = [mask](int required) { return (mask & required) == required; };
  bool ok = false;
  switch (to) {
    case IBV_QPS_RESET:
    case IBV_QPS_ERR:
      ok = true;
      break;
    case IBV_QPS_INIT:
      ok =
          (from == IBV_QPS_RESET && needs(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) ||
          from == IBV_QPS_INIT;
      break;
    case IBV_QPS_RTR:
      ok = from == IBV_QPS_INIT &&
           needs(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      break;
    case IBV_QPS_RTS:
      ok = (from == IBV_QPS_RTR && needs(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) ||
           from == IBV_QPS_RTS;
      break;
    default:
      ok = false;
  }
  if (!ok || ((mask & IBV_QP_PORT) && a->port_num != 1) ||
      ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)) {  // one P_Key: index 0
    return EINVAL;
  }
  if (mask & IBV_QP_PKEY_INDEX) qp.pkey_index = a->pkey_index;
  if (mask & IBV_QP_PATH_MTU) qp.path_mtu = static_cast<uint8_t>(a->path_mtu);
  if (mask & IBV_QP_AV) {
    qp.sl = a->ah_attr.sl;
    qp.traffic_class = a->ah_attr.is_global ? a->ah_attr.grh.traffic_class : 0;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) qp.access = a->qp_access_flags;
  if (mask & IBV_QP_AV) qp.dlid = a->ah_attr.dlid;
  if (mask & IBV_QP_DEST_QPN) qp.dqpn = a->dest_qp_num;
  if (to == IBV_QPS_RTR) {  // published before the state (set_state's release store)
    emu::QpSlot& own = qp.ctx->port->shared().qps[qp.slot];
    own.peer_lid.store(qp.dlid, std::memory_order_relaxed);
    own.peer_qpn.store(qp.dqpn, std::memory_order_relaxed);
  }
  if (mask & IBV_QP_TIMEOUT) qp.timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) qp.retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp.rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    qp.ctx->port->shared().qps[qp.slot].min_rnr_timer.store(a->min_rnr_timer,
                                                            std::memory_order_relaxed);
  }
  if (to == IBV_QPS_ERR && from != IBV_QPS_ERR) {
    enter_error(qp);
  } else if (to == IBV_QPS_RESET) {
    std::lock_guard<std::mutex> qlock(qp.mu);
    qp.sq.clear();
    qp.rq.clear();
    set_state(qp, to);
  } else {
    set_state(qp, to);
  }
  qp.ctx->port->ring_doorbell();
  return 0;
}

int destroy_qp(ibv_qp* q) {
  std::unique_ptr<QpHandle> handle(reinterpret_cast<QpHandle*>(q));
  std::unique_ptr<Qp> qp(handle->impl);
  Context& ctx = *qp->ctx;
  std::lock_guard<std::mutex> lock(ctx.mu);
  // What did not execute is discarded, as on hardware.
  ctx.port->shared().qps[qp->slot].state.store(emu::kQpFree, std::memory_order_release);
  ctx.qps[qp->slot] = nullptr;
  return 0;
}

int post_send(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp& qp = *qp_of(q);
  for (; wr != nullptr; wr = wr->next) {
    const auto reject = [&](int e) {
      *bad = wr;
      return e;
    };
    if (qp.state != IBV_QPS_RTS) return reject(EINVAL);
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
      return reject(EINVAL);
    }
    if (wr->num_sge > 1) return reject(EINVAL);
    SendWqe w;
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    w.imm = wr->imm_data;
    w.remote_addr = wr->wr.rdma.remote_addr;
    w.rkey = wr->wr.rdma.rkey;
    if (wr->num_sge == 1) {
      w.local_addr = wr->sg_list[0].addr;
      w.lkey = wr->sg_list[0].lkey;
      w.length = wr->sg_list[0].length;
    }
    if (wr->send_flags & IBV_SEND_INLINE) {
      if (w.length > qp.max_inline) return reject(EINVAL);
      // The CPU copies inline data now (providers write it into the WQE): the buffer may be
      // reused as soon as this returns, and it must be memory the CPU can read.
      w.inlined = true;
      w.inline_data.assign(reinterpret_cast<const uint8_t*>(w.local_addr),
                           reinterpret_cast<const uint8_t*>(w.local_addr) + w.length);
    }
    std::lock_guard<std::mutex> lock(qp.mu);
    if (qp.sq.size() >= qp.max_send) return reject(ENOMEM);
    qp.sq.push_back(std::move(w));
  }
  qp.ctx->port->ring_doorbell();
  return 0;
}

int post_recv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp& qp = *qp_of(q);
  emu::QpSlot& slot = qp.ctx->port->shared().qps[qp.slot];
  for (; wr != nullptr; wr = wr->next) {
    if (qp.state == IBV_QPS_RESET || wr->num_sge > 1) {
      *bad = wr;
      return EINVAL;
    }
    if (qp.state == IBV_QPS_ERR) {
      complete(*qp.recv_cq, make_wc(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
      continue;
    }
    std::lock_guard<std::mutex> lock(qp.mu);
    if (qp.rq.size() >= qp.max_recv) {
      *bad = wr;
      return ENOMEM;
    }
    qp.rq.push_back(wr->wr_id);
    slot.recv_posted.fetch_add(1, std::memory_order_acq_rel);
  }
  return 0;
}

int get_async_event(ibv_context* c, ibv_async_event* event) {
  uint64_t v = 0;
  if (read(c->async_fd, &v, sizeof(v)) != sizeof(v)) return -1;
  Context& ctx = *ctx_of(c);
  std::lock_guard<std::mutex> lock(ctx.async_mu);
  if (ctx.async_events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = ctx.async_events.front();
  ctx.async_events.pop_front();
  return 0;
}
void ack_async_event(ibv_async_event* event) { (void)event; }

const char* wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    default:
      return "unknown";
  }
}
const char* event_type_str(ibv_event_type e) {
  switch (e) {
    case IBV_EVENT_CQ_ERR:
      return "CQ error";
    case IBV_EVENT_QP_FATAL:
      return "local work queue catastrophic error";
    case IBV_EVENT_PORT_ERR:
      return "port error";
    case IBV_EVENT_PORT_ACTIVE:
      return "port active";
    default:
      return "unknown";
  }
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

// Runs `f(ctx)` on this process's context with port `lid`, under its lock.
template <typename F>
Status with_context(uint32_t lid, F&& f) {
  std::lock_guard<std::mutex> lock(contexts_mu());
  for (Context* ctx : contexts()) {
    if (ctx->port->lid() != lid) continue;
    std::lock_guard<std::mutex> ctx_lock(ctx->mu);
    f(*ctx);
    ctx->port->ring_doorbell();
    return Status::Ok();
  }
  return make_status(StatusCode::kInvalidArgument,
                     "emulated verbs: no port with LID %u in this process", lid);
}

// Runs `f(ctx, qp)` on the QPs `ref` names (qpn 0: all of the port's).
template <typename F>
Status with_qps(emu::QpRef ref, F&& f) {
  size_t found = 0;
  EC_RETURN_IF_ERROR(with_context(ref.lid, [&](Context& ctx) {
    for (Qp* qp : ctx.qps) {
      if (qp == nullptr || (ref.qpn != 0 && qp->handle->qp_num != ref.qpn)) continue;
      f(ctx, *qp);
      ++found;
    }
  }));
  if (found == 0) {
    return make_status(StatusCode::kInvalidArgument, "emulated verbs: port %u has no QP %u",
                       ref.lid, ref.qpn);
  }
  return Status::Ok();
}

}  // namespace

namespace emu {

Status inject_drop(QpRef ref, uint32_t packets) {
  return with_qps(ref, [packets](Context&, Qp& qp) { qp.drop = packets; });
}

Status inject_delay(QpRef ref, std::chrono::microseconds delay) {
  return with_qps(ref, [delay](Context&, Qp& qp) { qp.delay = delay; });
}

Status inject_qp_error(QpRef ref, bool async_event) {
  return with_qps(ref, [async_event](Context& ctx, Qp& qp) {
    if (qp.state == IBV_QPS_ERR) return;
    EC_DEBUG(kNet, "emulated verbs: QP %u: injected error", qp.handle->qp_num);
    if (async_event) {
      ibv_async_event e{};
      e.element.qp = qp.handle;
      e.event_type = IBV_EVENT_QP_FATAL;
      push_async(ctx, e);
    }
    enter_error(qp);
  });
}

Status inject_cq_error(uint32_t lid, bool async_event) {
  return with_context(lid, [async_event](Context& ctx) {
    std::vector<Cq*> cqs;
    for (Qp* qp : ctx.qps) {
      if (qp == nullptr) continue;
      for (Cq* cq : {qp->send_cq, qp->recv_cq}) {
        if (std::find(cqs.begin(), cqs.end(), cq) == cqs.end()) cqs.push_back(cq);
      }
    }
    for (Cq* cq : cqs) {
      {
        std::lock_guard<std::mutex> lock(cq->mu);
        cq->overrun = true;
      }
      if (async_event) {
        ibv_async_event e{};
        e.element.cq = cq->handle;
        e.event_type = IBV_EVENT_CQ_ERR;
        push_async(ctx, e);
      }
    }
  });
}

Status set_port_down(uint32_t lid, bool down) {
  return with_context(lid, [down](Context& ctx) {
    if (ctx.port_down == down) return;
    ctx.port_down = down;
    ibv_async_event e{};
    e.element.port_num = 1;
    e.event_type = down ? IBV_EVENT_PORT_ERR : IBV_EVENT_PORT_ACTIVE;
    push_async(ctx, e);
  });
}

void set_max_message(uint32_t bytes) { default_max_msg.store(bytes); }

Result<QpAttributes> qp_attributes(QpRef ref) {
  if (ref.qpn == 0) return Status(StatusCode::kInvalidArgument, "qp_attributes: name one QP");
  QpAttributes out;
  EC_RETURN_IF_ERROR(with_qps(ref, [&out](Context&, Qp& qp) {
    out.state = static_cast<ibv_qp_state>(qp.state.load());
    out.timeout = qp.timeout;
    out.retry_cnt = qp.retry_cnt;
    out.rnr_retry = qp.rnr_retry;
    out.min_rnr_timer = qp.ctx->port->shared().qps[qp.slot].min_rnr_timer.load();
    out.sl = qp.sl;
    out.traffic_class = qp.traffic_class;
    out.path_mtu = static_cast<ibv_mtu>(qp.path_mtu);
    out.pkey_index = qp.pkey_index;
    out.send_completions = qp.send_completions.load(std::memory_order_relaxed);
  }));
  return out;
}

void reset_fork_state() {
  fork_enabled.store(false);
  fork_too_late.store(false);
}

}  // namespace emu

const VerbsApi& emulated_verbs_api() {
  static const VerbsApi api = [] {
    VerbsApi a;
    a.source = "emulated";
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
    a.create_comp_channel = create_comp_channel;
    a.destroy_comp_channel = destroy_comp_channel;
    a.create_cq = create_cq;
    a.destroy_cq = destroy_cq;
    a.get_cq_event = get_cq_event;
    a.ack_cq_events = ack_cq_events;
    a.create_qp = create_qp;
    a.modify_qp = modify_qp;
    a.destroy_qp = destroy_qp;
    a.get_async_event = get_async_event;
    a.ack_async_event = ack_async_event;
    a.wc_status_str = wc_status_str;
    a.event_type_str = event_type_str;
    a.fork_init = fork_init;
    a.is_fork_initialized = is_fork_initialized;
    a.is_device_memory = emu::is_device_memory;
    emu::fill_cm_table(a);
    return a;
  }();
  return api;
}

}  // namespace eagercomm::verbs
