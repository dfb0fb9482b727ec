// The emulated RDMA device's thread (emu_objects.h), one per context, doing what a NIC does
// asynchronously: it executes the head send request of each QP in RTS onto the wire (the
// responder's port ring, emu_port.h), with the requester's retries, RNR NAKs and the responder's
// protection checks, and places the packets that arrive in its own port's ring.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_cm.h"
#include "transport/verbs/emulated/emu_objects.h"

namespace eagercomm::verbs::emu {
namespace {

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

const MrSlot* find_mr(const PortShared& port, uint32_t key) {
  const uint32_t slot = (key & 0xffff) - 1;
  if (slot >= kMaxMrs) return nullptr;
  const MrSlot& m = port.mrs[slot];
  return m.rkey.load(std::memory_order_acquire) == key ? &m : nullptr;
}

bool in_region(const MrSlot& m, uint64_t addr, uint64_t length) {
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
  if (rslot >= kMaxQps || lid_of(qp.dqpn) != qp.dlid) return dropped();
  QpSlot& rq = rs.qps[rslot];
  const uint32_t rstate = rq.state.load(std::memory_order_acquire);
  if (rstate != IBV_QPS_RTR && rstate != IBV_QPS_RTS) return dropped();
  if (rq.peer_lid.load(std::memory_order_relaxed) != ctx.port->lid() ||
      rq.peer_qpn.load(std::memory_order_relaxed) != qp.handle->qp_num) {
    return dropped();  // that QP is connected to another requester (a reused LID or QP number)
  }
  // Protection, checked as the responder would (its tables are shared memory).
  const MrSlot* target = find_mr(rs, w->rkey);
  if (target == nullptr || !(target->access & IBV_ACCESS_REMOTE_WRITE) ||
      !in_region(*target, w->remote_addr, w->length)) {
    fail_head(qp, IBV_WC_REM_ACCESS_ERR);
    return true;
  }
  const uint8_t* source = w->inline_data.data();
  if (!w->inlined && w->length > 0) {
    const MrSlot* local = find_mr(ctx.port->shared(), w->lkey);
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
    const uint32_t len = std::min(w->length - w->sent, kChunk);
    const bool last = w->sent + len == w->length;
    const bool ok = remote->push([&](Packet& p) {
      p.kind = PacketKind::kWrite;
      p.flags = (last ? kPacketLast : 0) | (last && with_imm ? kPacketWithImm : 0);
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
  if (ctx.port_down) return;        // lost: the requester retries
  if (p.kind == PacketKind::kCm) {  // a disconnect request, behind the data (emu_cm.h)
    deliver_cm_packet(p.data, p.len);
    return;
  }
  const uint32_t slot = slot_of(p.dst_qpn);
  if (slot >= ctx.qps.size() || ctx.qps[slot] == nullptr || lid_of(p.dst_qpn) != ctx.port->lid()) {
    return;  // no such QP: dropped
  }
  Qp& qp = *ctx.qps[slot];
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS) return;
  if (p.src_lid != qp.dlid || p.src_qpn != qp.dqpn) return;  // not from our requester
  const MrSlot* mr = find_mr(ctx.port->shared(), p.rkey);
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
  if (!(p.flags & kPacketWithImm)) return;
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

}  // namespace

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

}  // namespace eagercomm::verbs::emu
