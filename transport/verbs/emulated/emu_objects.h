// Internal: the emulated RDMA device's objects (emu_verbs.h) behind the verbs handles the
// application holds, shared by the files that implement them. Not installed.
//
//   emu_verbs.cc        the device, its contexts (each with a port and a device thread),
//                       protection domains, memory regions, fork protection; the table
//   emu_completions.cc  completion queues, completion channels, async events: how it reports
//   emu_qp.cc           the RC queue pair: its state machine, posting sends and receives
//   emu_device_thread.cc  the device thread: executes send requests onto the wire (retries,
//                       RNR, protection) and places inbound packets
//   emu_faults.cc       the faults tests script (emu_verbs.h)
//
// Locking: a context's `mu` guards its QP table and port state and is held by the device thread
// for a whole pass; a QP's `mu` its send and receive queues (posting threads and the device
// thread); a CQ's `mu` its completions. Lock order: contexts_mu(), then a context's mu.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "transport/verbs/emulated/emu_port.h"
#include "transport/verbs/verbs_api.h"

namespace eagercomm::verbs::emu {

using Clock = std::chrono::steady_clock;

inline constexpr uint32_t kMaxInline = 256;
inline constexpr uint32_t kMaxWr = 4096;
inline constexpr int kMaxCqe = 1 << 20;

struct Context;

// A verbs object as the application sees it, and the emulator's state behind it. Standard layout,
// so a pointer to `base` is a pointer to the handle.
template <typename Base, typename Impl>
struct Handle {
  Base base;
  Impl* impl;
};

struct CompChannel {
  ibv_comp_channel* handle = nullptr;
  std::mutex mu;
  std::deque<ibv_cq*> events;
};
using CompChannelHandle = Handle<ibv_comp_channel, CompChannel>;

struct Cq {
  ibv_cq* handle = nullptr;
  CompChannel* channel = nullptr;
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
  bool port_down = false;  // set_port_state(kDown): nothing sent or placed
  uint32_t max_msg = 0;    // the port's max_msg_sz (set_max_message())
  std::atomic<bool> stop{false};
  std::thread device;
};
using ContextHandle = Handle<ibv_context, Context>;

static_assert(std::is_standard_layout_v<QpHandle> && std::is_standard_layout_v<CqHandle> &&
              std::is_standard_layout_v<ContextHandle> &&
              std::is_standard_layout_v<CompChannelHandle>);

// A QP number carries its port's LID (so rdma_cm, given only a number, knows the port): the LID
// above the low 10 bits, the slot + 1 in them.
static_assert(kMaxQps == 1024 && kMaxLid <= 4096);
inline uint32_t qpn_of(uint32_t lid, uint32_t slot) { return lid << 10 | (slot + 1); }
inline uint32_t slot_of(uint32_t qpn) { return (qpn & 0x3ff) - 1; }
inline uint32_t lid_of(uint32_t qpn) { return qpn >> 10; }

template <typename H, typename B>
auto impl_of(B* base) {
  return reinterpret_cast<H*>(base)->impl;
}
inline Context* ctx_of(ibv_context* c) { return impl_of<ContextHandle>(c); }
inline Qp* qp_of(ibv_qp* q) { return impl_of<QpHandle>(q); }
inline Cq* cq_of(ibv_cq* c) { return impl_of<CqHandle>(c); }
inline CompChannel* channel_of(ibv_comp_channel* c) { return impl_of<CompChannelHandle>(c); }

// This process's open contexts, where the scripted faults (emu_faults.cc) find their targets.
std::mutex& contexts_mu();
std::vector<Context*>& contexts();

// ---- emu_completions.cc ----
// Queues an async event on the context and makes its async_fd readable.
void push_async(Context& ctx, ibv_async_event event);
// Adds a completion; an overrun drops it and reports the CQ in error (as hardware does).
void complete(Cq& cq, const ibv_wc& wc);
ibv_wc make_wc(const Qp& qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode);
// A send request's completion (counted: tests check how many the transport asks for).
void complete_send(Qp& qp, uint64_t wr_id, ibv_wc_status status);
const char* wc_status_str(ibv_wc_status status);
// The context operations behind ibv_poll_cq and ibv_req_notify_cq.
int poll_cq(ibv_cq* c, int n, ibv_wc* out);
int req_notify_cq(ibv_cq* c, int solicited_only);
// Puts the completion queue, completion channel and async event functions into `api`.
void fill_completion_table(VerbsApi& api);

// ---- emu_qp.cc ----
void set_state(Qp& qp, ibv_qp_state state);
// Moves `qp` to ERROR: every outstanding request completes with IBV_WC_WR_FLUSH_ERR.
void enter_error(Qp& qp);
// The context operations behind ibv_post_send and ibv_post_recv.
int post_send(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad);
int post_recv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad);
// Puts the queue-pair functions into `api`.
void fill_qp_table(VerbsApi& api);

// ---- emu_device_thread.cc ----
// The context's device thread: runs until ctx.stop (then rings the port's doorbell to end it).
void device_loop(Context& ctx);

}  // namespace eagercomm::verbs::emu
