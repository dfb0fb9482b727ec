#include <sched.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/deadline.h"
#include "transport/transport_log.h"
#include "transport/ucx/ucx_transport_impl.h"

namespace eagercomm::ucx {

// Closing, bounded by close_timeout in all:
//  1. The close handshake: kBye to every peer still there, then progress until each answered
//     (kByeAck, or its own kBye when it is closing too). A peer that got our kBye refuses to
//     send to us, so nothing it does later runs into a closed endpoint. That matters beyond
//     tidiness: where UCX emulates puts with messages (TCP), the target answers every put, and
//     with UCP_ERR_HANDLING_MODE_NONE UCX 1.13 aborts the process when such an answer meets a
//     closed connection. A peer that was told also treats our connection loss as expected.
//  2. Endpoints close with a flush: outstanding puts and notifications complete first (their
//     callbacks still run, into this object); failed endpoints close with FORCE.
//  3. Whatever is left when time is up is released without callbacks, and the worker, which
//     regions may keep alive, stops calling into this object.
void UcxTransport::close() {
  if (closing_) return;
  ucp_worker_h worker = core_->worker;
  closing_ = true;
  beacon_.reset();  // peers on this host see a departure, not a death
  const auto deadline = deadline_after(options_.close_timeout);
  auto expired = [&] { return std::chrono::steady_clock::now() >= deadline; };
  auto progress = [&] {
    if (ucp_worker_progress(worker) == 0) sched_yield();
  };

  // Every peer this rank connected to, and every peer that connected to it (its kHello came):
  // those may write into this rank's memory. A hello that arrives while this runs is answered
  // with the goodbye, as a peer that connected earlier is.
  std::vector<int> told;
  auto tell_new = [&] {
    for (Peer& p : peers_) {
      if (p.told || p.failed || p.bye_received || (!p.ep && !p.knows_us)) continue;
      p.told = true;
      if (!p.ep && !open_ep(p.rank).ok()) continue;
      Status s;
      while ((s = send_control(p.rank, kBye)).code() == StatusCode::kBusy && !expired()) {
        progress();
      }
      if (s.ok()) told.push_back(p.rank);
    }
  };
  auto all_answered = [&] {
    for (int r : told) {
      const Peer& p = peers_[r];
      if (!p.answered && !p.bye_received && !p.failed) return false;
    }
    return true;
  };
  (void)ucp_worker_progress(worker);  // hellos that are here already
  tell_new();
  while (!all_answered() && !expired()) {
    progress();
    tell_new();
  }
  size_t silent = 0;
  for (int r : told) silent += !peers_[r].answered && !peers_[r].bye_received && !peers_[r].failed;

  std::vector<void*> closing;
  for (Peer& p : peers_) {
    if (!p.ep) continue;
    // A flush close in peer-failure mode waits for the peer's progress. FORCE is allowed in
    // that mode (both sides use it) and loses nothing once the peer answered our goodbye with
    // nothing of ours in flight: it had served everything we sent before.
    const bool settled = (p.answered || p.bye_received) && p.outstanding == 0;
    ucp_request_param_t param{};
    if (p.ep_failed || (p.handles_failure && settled)) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
    if (UCS_PTR_IS_ERR(r)) {
      EC_DEBUG(kNet, "ucx: closing the endpoint to rank %d: %s", p.rank,
               ucs_status_string(UCS_PTR_STATUS(r)));
    } else if (r != nullptr) {
      closing.push_back(r);
    }
    p.ep = nullptr;
  }
  for (;;) {
    closing.erase(std::remove_if(closing.begin(), closing.end(),
                                 [](void* r) {
                                   if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
                                   ucp_request_free(r);
                                   return true;
                                 }),
                  closing.end());
    if (closing.empty() && free_ops_.size() == op_count_) break;
    if (expired()) break;
    progress();
  }
  if (silent > 0 || !closing.empty() || free_ops_.size() != op_count_) {
    EC_WARN(kNet,
            "ucx: closing took longer than %lld ms (%zu peers did not answer, %zu "
            "endpoints and %zu operations unfinished); releasing them",
            static_cast<long long>(options_.close_timeout.count()), silent, closing.size(),
            op_count_ - free_ops_.size());
  }
  // No callback may run into this object any more.
  for (void* r : closing) ucp_request_free(r);
  bool abandoned = false;
  for (size_t i = 0; i < op_count_; ++i) {
    Op& op = ops_[i];
    if (op.put_request) ucp_request_free(op.put_request);
    if (op.am_request) ucp_request_free(op.am_request);
    abandoned |= op.put_request != nullptr || op.am_request != nullptr;
    op.put_request = op.am_request = nullptr;
  }
  if (abandoned) core_->orphans.push_back(ops_);
  for (unsigned id : {kNotifyAmId, kControlAmId}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = nullptr;
    hp.arg = nullptr;
    (void)ucp_worker_set_am_recv_handler(worker, &hp);
  }
  closed_ = true;
}

}  // namespace eagercomm::ucx
