// The emulated RC queue pair (emu_objects.h): creation in a slot of its port's table, the state
// machine modify_qp enforces (the transitions and their required attributes, as the IB
// specification gives them), and posting send and receive requests.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include "transport/verbs/emulated/emu_objects.h"

namespace eagercomm::verbs::emu {
namespace {

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
  for (uint32_t i = 0; i < kMaxQps; ++i) {
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
    QpSlot& slot = s.qps[i];
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

// Whether modify_qp may take `from` to `to` with the attributes in `mask`.
bool allowed_transition(ibv_qp_state from, ibv_qp_state to, int mask) {
  auto needs = [mask](int required) { return (mask & required) == required; };
  switch (to) {
    case IBV_QPS_RESET:
    case IBV_QPS_ERR:
      return true;
    case IBV_QPS_INIT:
      return (from == IBV_QPS_RESET &&
              needs(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) ||
             from == IBV_QPS_INIT;
    case IBV_QPS_RTR:
      return from == IBV_QPS_INIT &&
             needs(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    case IBV_QPS_RTS:
      return (from == IBV_QPS_RTR && needs(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) ||
             from == IBV_QPS_RTS;
    default:
      return false;
  }
}

int modify_qp(ibv_qp* q, ibv_qp_attr* a, int mask) {
  Qp& qp = *qp_of(q);
  std::lock_guard<std::mutex> lock(qp.ctx->mu);
  const auto from = static_cast<ibv_qp_state>(qp.state.load());
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? a->qp_state : from;
  if (!allowed_transition(from, to, mask) || ((mask & IBV_QP_PORT) && a->port_num != 1) ||
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
    QpSlot& own = qp.ctx->port->shared().qps[qp.slot];
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
  ctx.port->shared().qps[qp->slot].state.store(kQpFree, std::memory_order_release);
  ctx.qps[qp->slot] = nullptr;
  return 0;
}

}  // namespace

void set_state(Qp& qp, ibv_qp_state state) {
  qp.state = state;
  qp.handle->state = state;
  qp.ctx->port->shared().qps[qp.slot].state.store(state, std::memory_order_release);
}

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
  QpSlot& slot = qp.ctx->port->shared().qps[qp.slot];
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

void fill_qp_table(VerbsApi& a) {
  a.create_qp = create_qp;
  a.modify_qp = modify_qp;
  a.destroy_qp = destroy_qp;
}

}  // namespace eagercomm::verbs::emu
