// The faults tests script on the emulated RDMA device (emu_verbs.h): lost packets, added
// latency, a QP or CQ in error, a port going down; and what a QP was given (qp_attributes).
#include <algorithm>
#include <mutex>
#include <vector>

#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_objects.h"
#include "transport/verbs/emulated/emu_verbs.h"

namespace eagercomm::verbs::emu {
namespace {

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
Status with_qps(QpRef ref, F&& f) {
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

Status inject_drop(QpRef ref, uint32_t packets) {
  return with_qps(ref, [packets](Context&, Qp& qp) { qp.drop = packets; });
}

Status inject_delay(QpRef ref, std::chrono::microseconds delay) {
  return with_qps(ref, [delay](Context&, Qp& qp) { qp.delay = delay; });
}

Status inject_qp_error(QpRef ref, AsyncEvent event) {
  const bool async_event = event == AsyncEvent::kYes;
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

Status inject_cq_error(uint32_t lid, AsyncEvent event) {
  const bool async_event = event == AsyncEvent::kYes;
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

Status set_port_state(uint32_t lid, PortState state) {
  const bool down = state == PortState::kDown;
  return with_context(lid, [down](Context& ctx) {
    if (ctx.port_down == down) return;
    ctx.port_down = down;
    ibv_async_event e{};
    e.element.port_num = 1;
    e.event_type = down ? IBV_EVENT_PORT_ERR : IBV_EVENT_PORT_ACTIVE;
    push_async(ctx, e);
  });
}

Result<uint32_t> qp_towards(uint32_t lid, uint32_t remote_lid) {
  uint32_t qpn = 0;
  EC_RETURN_IF_ERROR(with_context(lid, [&](Context& ctx) {
    for (const Qp* qp : ctx.qps) {
      if (qp != nullptr && qp->dlid == remote_lid) qpn = qp->handle->qp_num;
    }
  }));
  if (qpn == 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "emulated verbs: port %u has no queue pair towards port %u", lid,
                       remote_lid);
  }
  return qpn;
}

Result<uint32_t> qp_count(uint32_t lid) {
  uint32_t n = 0;
  EC_RETURN_IF_ERROR(with_context(lid, [&](Context& ctx) {
    for (const Qp* qp : ctx.qps) n += qp != nullptr;
  }));
  return n;
}

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

}  // namespace eagercomm::verbs::emu
