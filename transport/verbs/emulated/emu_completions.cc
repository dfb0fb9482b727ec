// How the emulated RDMA device reports (emu_objects.h): completion queues, completion channels
// with a pollable fd (one event per arming), and async events on the context's async_fd.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <mutex>

#include "transport/transport_log.h"
#include "transport/verbs/emulated/emu_objects.h"

namespace eagercomm::verbs::emu {
namespace {

void signal_fd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof(one));
}

ibv_comp_channel* create_comp_channel(ibv_context* c) {
  const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto ch = std::make_unique<CompChannel>();
  auto handle = std::make_unique<CompChannelHandle>();
  handle->impl = ch.get();
  handle->base.context = c;
  handle->base.fd = fd;
  ch->handle = &handle->base;
  ch.release();
  return &handle.release()->base;
}
int destroy_comp_channel(ibv_comp_channel* ch) {
  std::unique_ptr<CompChannelHandle> handle(reinterpret_cast<CompChannelHandle*>(ch));
  std::unique_ptr<CompChannel> impl(handle->impl);
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
  CompChannel& c = *channel_of(ch);
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

}  // namespace

void push_async(Context& ctx, ibv_async_event event) {
  std::lock_guard<std::mutex> lock(ctx.async_mu);
  ctx.async_events.push_back(event);
  signal_fd(ctx.handle->async_fd);
}

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

void fill_completion_table(VerbsApi& a) {
  a.create_comp_channel = create_comp_channel;
  a.destroy_comp_channel = destroy_comp_channel;
  a.create_cq = create_cq;
  a.destroy_cq = destroy_cq;
  a.get_cq_event = get_cq_event;
  a.ack_cq_events = ack_cq_events;
  a.get_async_event = get_async_event;
  a.ack_async_event = ack_async_event;
  a.wc_status_str = wc_status_str;
  a.event_type_str = event_type_str;
}

}  // namespace eagercomm::verbs::emu
