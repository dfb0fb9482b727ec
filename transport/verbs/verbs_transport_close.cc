// close() of the verbs transport: the posted sends drained (at most kCloseDrain), then the
// rdma_cm ids, the listener and its channel, the queue pairs, the completion queue and channel.
#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime/deadline.h"
#include "transport/transport_log.h"
#include "transport/verbs/verbs_transport_impl.h"

namespace eagercomm::verbs {

void VerbsTransport::close() {
  if (closed_) return;
  closed_ = true;
  drain_sends();
  // rdma_cm ids before the queue pairs and the channel (ids must go before their channel).
  for (int peer = 0; peer < static_cast<int>(peers_.size()); ++peer) {
    if (peers_[peer].conn) drive(peer, ConnEvent::kClose);
    if (peers_[peer].id != nullptr) api_->destroy_id(peers_[peer].id);
    peers_[peer].id = nullptr;
  }
  if (listen_id_ != nullptr) api_->destroy_id(listen_id_);
  listen_id_ = nullptr;
  if (cm_channel_ != nullptr) api_->destroy_event_channel(cm_channel_);
  cm_channel_ = nullptr;
  for (Peer& p : peers_) {
    if (p.qp != nullptr) api_->destroy_qp(p.qp);
    p.qp = nullptr;
  }
  if (cq_ != nullptr) api_->destroy_cq(cq_);
  cq_ = nullptr;
  if (channel_ != nullptr) api_->destroy_comp_channel(channel_);
  channel_ = nullptr;
  credit_in_.reset();  // regions held by users keep the device context alive themselves
  credit_out_.reset();
}

void VerbsTransport::drain_sends() {
  // What close() destroys next, a queue pair, discards the work requests it has not executed:
  // the exit notices just posted and the last writes (issue 18, defect 5). Wait for their
  // completions first, at most kCloseDrain: a peer that no longer answers costs the retries.
  const auto deadline = deadline_after(kCloseDrain);
  // The unsignaled tail is credit updates, which nobody needs once we close. A peer that
  // disconnected has closed: what we still send it (our exit notice, when it closed first) will
  // never be read, and its destroyed queue pair would keep us waiting out the whole drain.
  auto waits_for = [](const Peer& p) {
    return p.qp != nullptr && p.connected && !p.failed && !p.left && !p.disconnect &&
           p.send_queue.awaits_signaled();
  };
  auto pending = [&] { return std::any_of(peers_.begin(), peers_.end(), waits_for); };
  while (cq_ != nullptr && pending() && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[32];
    const int got = ibv_poll_cq(cq_, 32, wc);
    if (got < 0) break;
    if (got == 0) {
      progress_cm();  // a peer's disconnect ends the wait for it
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    for (int i = 0; i < got; ++i) {
      const auto qp = qp_to_peer_.find(wc[i].qp_num);
      if (qp == qp_to_peer_.end() || (wc[i].wr_id & kReceiveWr)) continue;
      Peer& p = peers_[qp->second];
      p.send_queue.retire(writes_.retired_by(wc[i].wr_id));
      if (wc[i].status != IBV_WC_SUCCESS) p.failed = true;  // nothing more will complete
    }
  }
  // Out of time: what destroying the queue pairs discards is named, with the counts that kept
  // the wait going. Info, not a warning: a peer reached through the store path (no rdma_cm, so
  // no disconnect to see) that closed first ends here too.
  for (int peer = 0; peer < static_cast<int>(peers_.size()); ++peer) {
    const Peer& p = peers_[peer];
    if (!waits_for(p)) continue;
    EC_INFO(kNet,
            "verbs: close: %u send requests to rank %d (%u of them unsignaled credit updates) had "
            "not completed within %lld ms; they are discarded with its queue pair",
            p.send_queue.sends(), peer, p.send_queue.unsignaled(),
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::milliseconds>(kCloseDrain).count()));
  }
}

}  // namespace eagercomm::verbs
