// The emulated rdma_cm (emu_cm.h): ids, event channels and what each message does to them; the
// messages themselves travel as emu_cm_wire.h says.
#include "transport/verbs/emulated/emu_cm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <vector>

#include "transport/verbs/emulated/emu_cm_wire.h"
#include "transport/verbs/emulated/emu_verbs.h"

namespace eagercomm::verbs::emu {
namespace {

struct Channel;

enum class IdState {
  kIdle,
  kBound,
  kListening,
  kResolved,
  kConnecting,
  kRequested,
  kConnected,
  kDisconnected
};

struct CmId {
  rdma_cm_id* handle = nullptr;
  Channel* channel = nullptr;
  uint32_t number = 0;
  IdState state = IdState::kIdle;
  uint32_t dst_port = 0;  // the peer's channel (active side: from rdma_resolve_addr)
  uint32_t remote_id = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_psn = 0;
  uint32_t local_qpn = 0;
  uint32_t local_psn = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t responder_resources = 1;
  uint8_t initiator_depth = 1;
};
using IdHandle = std::pair<rdma_cm_id, CmId*>;  // the id as the application sees it, first

struct EventBox {
  rdma_cm_event event{};
  std::vector<uint8_t> data;
};

struct Channel {
  rdma_event_channel* handle = nullptr;
  int reservation = -1;  // the TCP socket holding the port
  uint32_t port = 0;
  Inbox* inbox = nullptr;
  std::mutex mu;  // everything below (the application's thread and port device threads)
  std::unordered_map<uint32_t, CmId*> ids;
  uint32_t next_id = 1;
  CmId* listener = nullptr;
  std::deque<std::unique_ptr<EventBox>> events;
};
using ChannelHandle = std::pair<rdma_event_channel, Channel*>;

CmId* id_of(rdma_cm_id* id) { return reinterpret_cast<IdHandle*>(id)->second; }
Channel* channel_of(rdma_event_channel* ch) { return reinterpret_cast<ChannelHandle*>(ch)->second; }

// This process's channels by port: where messages that came through a port ring go.
std::mutex& channels_mu() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<uint32_t, Channel*>& channels() {
  static std::unordered_map<uint32_t, Channel*> m;
  return m;
}

// The context every bound id reports (rdma_cm opens its own context of the device).
ibv_context* cm_context() {
  static ibv_context ctx = [] {
    ibv_context c{};
    int n = 0;
    ibv_device** list = emulated_verbs_api().get_device_list(&n);
    c.device = list[0];  // a static device: it outlives the list
    emulated_verbs_api().free_device_list(list);
    return c;
  }();
  return &ctx;
}

uint32_t random_psn() { return std::random_device{}() & 0xffffff; }

bool loopback(const sockaddr* a) {
  if (a == nullptr) return false;
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&ip);
  }
  return false;
}

uint32_t port_of(const sockaddr* a) {
  return a->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
}

// Queues an event on the id's channel (its mutex held).
void push_event(Channel& ch, CmId* id, rdma_cm_event_type type, int status,
                const CmWire* with = nullptr, CmId* listen = nullptr) {
  auto box = std::make_unique<EventBox>();
  box->event.id = id->handle;
  box->event.listen_id = listen != nullptr ? listen->handle : nullptr;
  box->event.event = type;
  box->event.status = status;
  if (with != nullptr) {
    box->data.assign(with->private_data, with->private_data + with->private_len);
    box->event.param.conn.private_data = box->data.data();
    box->event.param.conn.private_data_len = static_cast<uint8_t>(with->private_len);
    box->event.param.conn.responder_resources = with->responder_resources;
    box->event.param.conn.initiator_depth = with->initiator_depth;
    box->event.param.conn.retry_count = with->retry_count;
    box->event.param.conn.rnr_retry_count = with->rnr_retry_count;
    box->event.param.conn.qp_num = with->qpn;
  }
  ch.events.push_back(std::move(box));
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(ch.handle->fd, &one, sizeof(one));
}

CmWire message(CmKind kind, const CmId& from, const rdma_conn_param* param = nullptr) {
  CmWire m{};
  m.kind = kind;
  m.src_port = from.channel->port;
  m.src_id = from.number;
  m.dst_port = from.dst_port;
  m.dst_id = from.remote_id;
  m.qpn = from.local_qpn;
  m.psn = from.local_psn;
  if (param != nullptr) {
    m.responder_resources = param->responder_resources;
    m.initiator_depth = param->initiator_depth;
    m.retry_count = param->retry_count;
    m.rnr_retry_count = param->rnr_retry_count;
    m.private_len = std::min<uint32_t>(param->private_data_len, kMaxPrivate);
    if (m.private_len > 0) std::memcpy(m.private_data, param->private_data, m.private_len);
  }
  return m;
}

CmId* new_id(Channel& ch, void* context) {
  auto handle = std::make_unique<IdHandle>();
  auto id = std::make_unique<CmId>();
  handle->second = id.get();
  handle->first.channel = ch.handle;
  handle->first.context = context;
  handle->first.ps = RDMA_PS_TCP;
  handle->first.qp_type = IBV_QPT_RC;
  id->handle = &handle->first;
  id->channel = &ch;
  id->number = ch.next_id++;
  ch.ids[id->number] = id.get();
  handle.release();
  return id.release();
}

void bind_to_device(CmId& id) {
  id.handle->verbs = cm_context();
  id.handle->port_num = 1;
}

// Sends the disconnect request to the peer's port, behind our data (see the header).
void send_disconnect(CmId& id) {
  if (id.remote_qpn == 0) return;
  const CmWire m = message(CmKind::kDreq, id);
  if (!send_through_port(id.remote_qpn >> 10, m)) send_to_inbox(m);  // its port is gone
}

// Acts on a message for channel `ch` (its mutex held).
void on_message(Channel& ch, const CmWire& m) {
  if (m.kind == CmKind::kReq) {
    if (ch.listener == nullptr) {
      CmWire rej{};
      rej.kind = CmKind::kRej;
      rej.src_port = ch.port;
      rej.dst_port = m.src_port;
      rej.dst_id = m.src_id;
      send_to_inbox(rej);
      return;
    }
    CmId* child = new_id(ch, ch.listener->handle->context);
    bind_to_device(*child);
    child->state = IdState::kRequested;
    child->dst_port = m.src_port;
    child->remote_id = m.src_id;
    child->remote_qpn = m.qpn;
    child->remote_psn = m.psn;
    child->retry_count = m.retry_count;
    child->rnr_retry_count = m.rnr_retry_count;
    push_event(ch, child, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m, ch.listener);
    return;
  }
  const auto found = ch.ids.find(m.dst_id);
  if (found == ch.ids.end()) {
    // Destroyed meanwhile. A reply to a request it made is refused, as a CM does when the
    // requester is gone, so that the accepting side does not wait for an RTU forever.
    if (m.kind == CmKind::kRep) {
      CmWire rej{};
      rej.kind = CmKind::kRej;
      rej.src_port = ch.port;
      rej.dst_port = m.src_port;
      rej.dst_id = m.src_id;
      send_to_inbox(rej);
    }
    return;
  }
  CmId& id = *found->second;
  switch (m.kind) {
    case CmKind::kRep:
      if (id.state != IdState::kConnecting) return;
      id.remote_id = m.src_id;
      id.remote_qpn = m.qpn;
      id.remote_psn = m.psn;
      push_event(ch, &id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m);
      return;
    case CmKind::kRtu:
      if (id.state != IdState::kRequested) return;
      id.state = IdState::kConnected;
      push_event(ch, &id, RDMA_CM_EVENT_ESTABLISHED, 0);
      return;
    case CmKind::kRej:
      if (id.state != IdState::kConnecting && id.state != IdState::kRequested) return;
      id.state = IdState::kIdle;
      push_event(ch, &id, RDMA_CM_EVENT_REJECTED, 28, &m);  // IB_CM_REJ_CONSUMER_DEFINED
      return;
    case CmKind::kDreq:
      if (id.state == IdState::kDisconnected) return;
      id.state = IdState::kDisconnected;
      push_event(ch, &id, RDMA_CM_EVENT_DISCONNECTED, 0);
      return;
    case CmKind::kReq:
      return;
  }
}

// ---- the table's functions ----

rdma_event_channel* create_event_channel() {
  reclaim_dead_inboxes();
  // The kernel hands out the port, so it is unique on the host while the socket lives.
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return nullptr;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(s);
    return nullptr;
  }
  auto ch = std::make_unique<Channel>();
  ch->reservation = s;
  ch->port = ntohs(a.sin_port);
  const int fd = eventfd(0, EFD_CLOEXEC);
  ch->inbox = fd >= 0 ? create_inbox(ch->port) : nullptr;
  if (ch->inbox == nullptr) {
    if (fd >= 0) close(fd);
    close(s);
    errno = ENOMEM;
    return nullptr;
  }
  auto handle = std::make_unique<ChannelHandle>();
  handle->first.fd = fd;
  handle->second = ch.get();
  ch->handle = &handle->first;
  {
    std::lock_guard<std::mutex> lock(channels_mu());
    channels()[ch->port] = ch.get();
  }
  ch.release();
  return &handle.release()->first;
}

}  // namespace

std::string inbox_name_of(const rdma_event_channel* channel) {
  return inbox_name(reinterpret_cast<const ChannelHandle*>(channel)->second->port);
}

namespace {

void destroy_event_channel(rdma_event_channel* c) {
  std::unique_ptr<ChannelHandle> handle(reinterpret_cast<ChannelHandle*>(c));
  std::unique_ptr<Channel> ch(handle->second);
  {
    std::lock_guard<std::mutex> lock(channels_mu());
    channels().erase(ch->port);
  }
  // Ids still here are requests that came after the application destroyed its own ids (it
  // must, before the channel): their CONNECT_REQUEST events were never taken.
  for (auto& [number, id] : ch->ids) {
    std::unique_ptr<IdHandle> owned(reinterpret_cast<IdHandle*>(id->handle));
    std::unique_ptr<CmId> impl(id);
  }
  ch->ids.clear();
  remove_inbox(ch->port, ch->inbox);
  close(ch->reservation);
  close(c->fd);
}

int create_id(rdma_event_channel* c, rdma_cm_id** id, void* context, rdma_port_space ps) {
  if (ps != RDMA_PS_TCP) {
    errno = EINVAL;
    return -1;
  }
  Channel& ch = *channel_of(c);
  std::lock_guard<std::mutex> lock(ch.mu);
  *id = new_id(ch, context)->handle;
  return 0;
}

int destroy_id(rdma_cm_id* handle) {
  CmId* id = id_of(handle);
  Channel& ch = *id->channel;
  {
    std::lock_guard<std::mutex> lock(ch.mu);
    // Messages that came meanwhile first (a reply names the peer's id to disconnect from).
    for (CmWire m; inbox_pop(*ch.inbox, &m);) on_message(ch, m);
    if (id->state == IdState::kConnected || id->state == IdState::kRequested ||
        id->state == IdState::kConnecting) {
      send_disconnect(*id);  // as the kernel does for a connected id
    }
    ch.ids.erase(id->number);
    if (ch.listener == id) ch.listener = nullptr;
    // Events of the id not yet taken go with it, as the kernel's ucma_destroy_id cleans them up
    // (an address resolved for an attempt given up after a crossing request, say): nothing
    // hands out an event naming a destroyed id.
    std::erase_if(ch.events, [handle](const std::unique_ptr<EventBox>& box) {
      return box->event.id == handle;
    });
  }
  std::unique_ptr<IdHandle> owned(reinterpret_cast<IdHandle*>(handle));
  std::unique_ptr<CmId> impl(id);
  return 0;
}

int bind_addr(rdma_cm_id* handle, sockaddr* addr) {
  // The emulated device's address is the loopback interface's.
  if (!loopback(addr)) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  bind_to_device(id);
  id.state = IdState::kBound;
  return 0;
}

int listen(rdma_cm_id* handle, int backlog) {
  (void)backlog;
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (id.state != IdState::kBound || id.channel->listener != nullptr) {
    errno = EADDRINUSE;
    return -1;
  }
  id.state = IdState::kListening;
  id.channel->listener = &id;
  return 0;
}

uint16_t get_src_port(rdma_cm_id* handle) { return htons(id_of(handle)->channel->port); }

int resolve_addr(rdma_cm_id* handle, sockaddr* src, sockaddr* dst, int timeout_ms) {
  (void)src;
  (void)timeout_ms;
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (!loopback(dst)) {
    push_event(*id.channel, &id, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
    return 0;
  }
  bind_to_device(id);
  id.dst_port = port_of(dst);
  id.state = IdState::kResolved;
  Inbox* box = attach_inbox(id.dst_port);
  if (box != nullptr) unmap_inbox(box);
  push_event(*id.channel, &id,
             box != nullptr ? RDMA_CM_EVENT_ADDR_RESOLVED : RDMA_CM_EVENT_ADDR_ERROR,
             box != nullptr ? 0 : -ECONNREFUSED);
  return 0;
}

int resolve_route(rdma_cm_id* handle, int timeout_ms) {
  (void)timeout_ms;
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (id.state != IdState::kResolved) {
    errno = EINVAL;
    return -1;
  }
  push_event(*id.channel, &id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

int connect(rdma_cm_id* handle, rdma_conn_param* param) {
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (id.state != IdState::kResolved || param == nullptr || param->qp_num == 0) {
    errno = EINVAL;
    return -1;
  }
  id.local_qpn = param->qp_num;
  id.local_psn = random_psn();
  id.retry_count = param->retry_count;
  id.rnr_retry_count = param->rnr_retry_count;
  id.remote_id = 0;  // the listener
  id.state = IdState::kConnecting;
  if (!send_to_inbox(message(CmKind::kReq, id, param))) {
    push_event(*id.channel, &id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
  }
  return 0;
}

int accept(rdma_cm_id* handle, rdma_conn_param* param) {
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (id.state != IdState::kRequested || param == nullptr || param->qp_num == 0) {
    errno = EINVAL;
    return -1;
  }
  id.local_qpn = param->qp_num;
  id.local_psn = random_psn();
  return send_to_inbox(message(CmKind::kRep, id, param)) ? 0 : (errno = ECONNRESET, -1);
}

int reject(rdma_cm_id* handle, const void* data, uint8_t length) {
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  rdma_conn_param p{};
  p.private_data = data;
  p.private_data_len = length;
  send_to_inbox(message(CmKind::kRej, id, &p));
  id.state = IdState::kIdle;
  return 0;
}

int establish(rdma_cm_id* handle) {
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (id.state != IdState::kConnecting || id.remote_qpn == 0) {
    errno = EINVAL;
    return -1;
  }
  id.state = IdState::kConnected;
  send_to_inbox(message(CmKind::kRtu, id));
  return 0;
}

int disconnect(rdma_cm_id* handle) {
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  if (id.state != IdState::kConnected && id.state != IdState::kRequested &&
      id.state != IdState::kConnecting) {
    errno = EINVAL;
    return -1;
  }
  send_disconnect(id);
  id.state = IdState::kDisconnected;
  push_event(*id.channel, &id, RDMA_CM_EVENT_DISCONNECTED, 0);
  return 0;
}

int get_cm_event(rdma_event_channel* c, rdma_cm_event** event) {
  Channel& ch = *channel_of(c);
  std::lock_guard<std::mutex> lock(ch.mu);
  for (CmWire m; inbox_pop(*ch.inbox, &m);) on_message(ch, m);
  if (ch.events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  uint64_t drained = 0;
  [[maybe_unused]] const ssize_t n = read(c->fd, &drained, sizeof(drained));  // non-blocking
  if (ch.events.size() > 1) {  // more remain: keep the fd readable
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = write(c->fd, &one, sizeof(one));
  }
  EventBox* box = ch.events.front().release();
  ch.events.pop_front();
  *event = &box->event;
  return 0;
}

int ack_cm_event(rdma_cm_event* event) {
  std::unique_ptr<EventBox> box(reinterpret_cast<EventBox*>(event));  // event is its first member
  return 0;
}

const char* event_str(rdma_cm_event_type e) {
  switch (e) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    default:
      return "RDMA_CM_EVENT_OTHER";
  }
}

// What a CM derives for each transition; its min_rnr_timer is 0 (655 ms), as the kernel's is.
int init_qp_attr(rdma_cm_id* handle, ibv_qp_attr* attr, int* mask) {
  CmId& id = *id_of(handle);
  std::lock_guard<std::mutex> lock(id.channel->mu);
  switch (attr->qp_state) {
    case IBV_QPS_INIT:
      attr->pkey_index = 0;
      attr->port_num = 1;
      attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return 0;
    case IBV_QPS_RTR:
      if (id.remote_qpn == 0) break;
      attr->path_mtu = IBV_MTU_4096;
      attr->dest_qp_num = id.remote_qpn;
      attr->rq_psn = id.remote_psn;
      attr->max_dest_rd_atomic = id.responder_resources;
      attr->min_rnr_timer = 0;
      attr->ah_attr = ibv_ah_attr{};
      attr->ah_attr.dlid = static_cast<uint16_t>(id.remote_qpn >> 10);
      attr->ah_attr.port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      if (id.remote_qpn == 0) break;
      attr->timeout = 14;
      attr->retry_cnt = id.retry_count;
      attr->rnr_retry = id.rnr_retry_count;
      attr->sq_psn = id.local_psn;
      attr->max_rd_atomic = id.initiator_depth;
      *mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
              IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      break;
  }
  errno = EINVAL;
  return -1;
}

}  // namespace

void deliver_cm_packet(const uint8_t* data, uint32_t length) {
  if (length < sizeof(CmWire)) return;
  CmWire m;
  std::memcpy(&m, data, sizeof(m));
  std::lock_guard<std::mutex> lock(channels_mu());
  const auto found = channels().find(m.dst_port);
  if (found == channels().end()) return;
  Channel& ch = *found->second;
  std::lock_guard<std::mutex> ch_lock(ch.mu);
  // What the peer sent before through the inbox (its RTU) comes first.
  for (CmWire earlier; inbox_pop(*ch.inbox, &earlier);) on_message(ch, earlier);
  on_message(ch, m);
}

void fill_cm_table(VerbsApi& a) {
  a.has_cm = true;
  a.cm_on_loopback = true;
  a.cm_missing.clear();
  a.create_event_channel = create_event_channel;
  a.destroy_event_channel = destroy_event_channel;
  a.create_id = create_id;
  a.destroy_id = destroy_id;
  a.bind_addr = bind_addr;
  a.resolve_addr = resolve_addr;
  a.resolve_route = resolve_route;
  a.listen = listen;
  a.connect = connect;
  a.accept = accept;
  a.reject = reject;
  a.establish = establish;
  a.disconnect = disconnect;
  a.get_cm_event = get_cm_event;
  a.ack_cm_event = ack_cm_event;
  a.event_str = event_str;
  a.init_qp_attr = init_qp_attr;
  a.get_src_port = get_src_port;
}

}  // namespace eagercomm::verbs::emu
