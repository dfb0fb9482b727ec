// TcpStoreServer: one poll() thread serving every connection of the bootstrap store; see
// tcp_store.h for the protocol and the limits, tcp_store_wire.h for the frames.
#include "runtime/tcp_store.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "runtime/deadline.h"
#include "runtime/log.h"
#include "runtime/tcp_store_wire.h"
#include "runtime/unique_fd.h"

namespace eagercomm {

using namespace tcp_store_wire;

// ======================================= server =======================================

namespace {

struct Conn {
  uint64_t id = 0;
  UniqueFd fd;
  std::string peer;  // "ip:port", for the log
  bool authed = false;
  bool closing = false;     // answered a refused hello: close once the answer is out
  bool dead = false;        // dropped this round; erased (with its waits) at the end of it
  std::vector<uint8_t> in;  // bytes received, not yet a whole frame
  std::deque<std::vector<uint8_t>> out;
  size_t out_offset = 0;  // sent bytes of out.front()
  size_t out_bytes = 0;   // unsent bytes in out
  Clock::time_point opened;
  Clock::time_point in_progress;   // last time bytes arrived
  Clock::time_point out_progress;  // last time bytes left (or the queue became non-empty)
};

// A request waiting for keys: a get (one key, answered with its value) or a wait.
struct Waiter {
  std::vector<std::string> keys;  // distinct
  size_t missing = 0;             // how many of `keys` are not set yet
  bool is_get = false;
};

using WaiterId = std::pair<uint64_t, uint64_t>;  // (connection id, request id)

}  // namespace

struct TcpStoreServer::Impl {
  UniqueFd listen_fd;
  UniqueFd wake_fd;  // eventfd: the destructor's stop signal
  std::atomic<bool> stop{false};
  std::string token;
  Options options;
  std::string name;  // "store 0.0.0.0:29400"

  // Everything below belongs to the server thread.
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  uint64_t next_conn_id = 1;
  std::map<std::string, Bytes> data;
  std::map<WaiterId, Waiter> waiters;
  std::unordered_map<std::string, std::vector<WaiterId>> waiting_on;  // key -> waits missing it
  Clock::time_point accept_paused_until{};
  std::vector<uint8_t> scratch = std::vector<uint8_t>(kReadChunkBytes);

  void run();
  void accept_all();
  void read_from(Conn& c);
  bool handle_frame(Conn& c, const uint8_t* body, size_t size);
  bool handle_hello(Conn& c, FrameReader& r);
  bool handle_request(Conn& c, FrameReader& r);
  void queue(Conn& c, std::vector<uint8_t> frame);
  void flush(Conn& c);
  void drop(Conn& c, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
  void notify(const std::string& key);
  void finish_wait(const WaiterId& id, Waiter& w);
  void unindex(const WaiterId& id, const Waiter& w);
  void respond(Conn& c, uint64_t request, StatusCode code, const std::string& message);
  Clock::time_point housekeeping(Clock::time_point now);
  void erase_dead();
};

void TcpStoreServer::Impl::drop(Conn& c, const char* fmt, ...) {
  if (c.dead) return;
  c.dead = true;
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  EC_WARN(kBoot, "%s: disconnecting client %s: %s", name.c_str(), c.peer.c_str(), why);
}

void TcpStoreServer::Impl::queue(Conn& c, std::vector<uint8_t> frame) {
  if (c.dead) return;
  if (c.out.empty()) c.out_progress = Clock::now();
  c.out_bytes += frame.size();
  c.out.push_back(std::move(frame));
  if (c.out_bytes > kMaxQueuedBytes) {
    drop(c, "%zu bytes of answers not read", c.out_bytes);
    return;
  }
  flush(c);
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (!c.dead && !c.out.empty()) {
    const std::vector<uint8_t>& front = c.out.front();
    const ssize_t n = ::send(c.fd.get(), front.data() + c.out_offset, front.size() - c.out_offset,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EPIPE || errno == ECONNRESET) {
        // A client that leaves before its answer is not misbehaving (a rank that timed out).
        EC_DEBUG(kBoot, "%s: client %s left: %s", name.c_str(), c.peer.c_str(), strerror(errno));
        c.dead = true;
      } else {
        drop(c, "send failed: %s", strerror(errno));
      }
      return;
    }
    c.out_progress = Clock::now();
    c.out_offset += static_cast<size_t>(n);
    c.out_bytes -= static_cast<size_t>(n);
    if (c.out_offset == front.size()) {
      c.out.pop_front();
      c.out_offset = 0;
    }
  }
  if (!c.dead && c.out.empty() && c.closing) c.dead = true;
}

void TcpStoreServer::Impl::respond(Conn& c, uint64_t request, StatusCode code,
                                   const std::string& message) {
  FrameWriter w(Msg::kResponse);
  w.u64(request);
  w.u8(static_cast<uint8_t>(code));
  if (code != StatusCode::kOk) w.str(message);  // an ok answer carries only its payload
  queue(c, std::move(w).finish());
}

void TcpStoreServer::Impl::unindex(const WaiterId& id, const Waiter& w) {
  for (const std::string& key : w.keys) {
    auto it = waiting_on.find(key);
    if (it == waiting_on.end()) continue;
    std::erase(it->second, id);
    if (it->second.empty()) waiting_on.erase(it);
  }
}

// Answers a wait whose keys are all set. The caller erases it from `waiters`.
void TcpStoreServer::Impl::finish_wait(const WaiterId& id, Waiter& w) {
  auto c = conns.find(id.first);
  if (c == conns.end() || c->second->dead) return;
  FrameWriter f(Msg::kResponse);
  f.u64(id.second);
  f.u8(static_cast<uint8_t>(StatusCode::kOk));
  if (w.is_get) {
    const Bytes& value = data.at(w.keys.front());
    f.blob(value.data(), value.size());
  }
  queue(*c->second, std::move(f).finish());
}

// `key` was just set: every wait that missed it misses one key less.
void TcpStoreServer::Impl::notify(const std::string& key) {
  auto it = waiting_on.find(key);
  if (it == waiting_on.end()) return;
  const std::vector<WaiterId> ids = std::move(it->second);
  waiting_on.erase(it);
  for (const WaiterId& id : ids) {
    auto w = waiters.find(id);
    if (w == waiters.end() || --w->second.missing > 0) continue;
    finish_wait(id, w->second);
    waiters.erase(w);
  }
}

bool TcpStoreServer::Impl::handle_hello(Conn& c, FrameReader& r) {
  uint8_t type = 0;
  uint32_t magic = 0;
  uint16_t version = 0, reserved = 0;
  std::string presented;
  if (!r.u8(type) || type != static_cast<uint8_t>(Msg::kHello) || !r.u32(magic) ||
      magic != kMagic) {
    drop(c, "no eagercomm store hello (some other program?)");
    return false;
  }
  if (!r.u16(version) || !r.u16(reserved) || !r.str(presented, kTcpStoreMaxTokenBytes) ||
      !r.done()) {
    drop(c, "malformed hello");
    return false;
  }
  HelloResult result = HelloResult::kAccepted;
  std::string message;
  if (version != kProtocolVersion) {
    result = HelloResult::kBadVersion;
    message = "the store speaks protocol version " + std::to_string(kProtocolVersion) +
              ", the client " + std::to_string(version);
    EC_WARN(kBoot, "%s: refused client %s: %s", name.c_str(), c.peer.c_str(), message.c_str());
  } else if (!token.empty() && !same_secret(presented, token)) {
    result = HelloResult::kRefused;
    message = "wrong job token";
    EC_WARN(kBoot, "%s: refused client %s: wrong job token", name.c_str(), c.peer.c_str());
  }
  FrameWriter w(Msg::kHelloReply);
  w.u32(kMagic);
  w.u16(kProtocolVersion);
  w.u8(static_cast<uint8_t>(result));
  w.str(message);
  if (result == HelloResult::kAccepted) {
    c.authed = true;
    EC_DEBUG(kBoot, "%s: client %s joined", name.c_str(), c.peer.c_str());
  } else {
    c.closing = true;
  }
  queue(c, std::move(w).finish());
  return result == HelloResult::kAccepted;
}

bool TcpStoreServer::Impl::handle_request(Conn& c, FrameReader& r) {
  uint8_t op = 0;
  uint64_t id = 0;
  if (!r.u8(op) || !r.u64(id)) {
    drop(c, "truncated request header");
    return false;
  }
  std::string key;
  switch (static_cast<Msg>(op)) {
    case Msg::kSet: {
      Bytes value;
      if (!r.str(key, kTcpStoreMaxKeyBytes) || !r.blob(value, kTcpStoreMaxValueBytes) ||
          !r.done()) {
        drop(c, "malformed set (key or value too long, or truncated)");
        return false;
      }
      data[key] = std::move(value);
      respond(c, id, StatusCode::kOk, {});
      notify(key);
      return true;
    }
    case Msg::kAdd: {
      uint64_t raw = 0;
      if (!r.str(key, kTcpStoreMaxKeyBytes) || !r.u64(raw) || !r.done()) {
        drop(c, "malformed add");
        return false;
      }
      Bytes& b = data[key];
      int64_t value = 0;
      if (!counter_of(b, value)) {
        respond(c, id, StatusCode::kInvalidArgument,
                "store key '" + key + "' does not hold a counter");
        return true;
      }
      // Wraps like the two's complement hardware add rather than overflowing (UB).
      value = static_cast<int64_t>(static_cast<uint64_t>(value) + raw);
      b.resize(sizeof(value));
      std::memcpy(b.data(), &value, sizeof(value));
      FrameWriter w(Msg::kResponse);
      w.u64(id);
      w.u8(static_cast<uint8_t>(StatusCode::kOk));
      w.u64(static_cast<uint64_t>(value));
      queue(c, std::move(w).finish());
      notify(key);
      return true;
    }
    case Msg::kGet:
    case Msg::kWait: {
      Waiter w;
      w.is_get = static_cast<Msg>(op) == Msg::kGet;
      uint32_t count = 1;
      if (!w.is_get && (!r.u32(count) || count > kTcpStoreMaxWaitKeys)) {
        drop(c, "malformed wait (key count)");
        return false;
      }
      std::set<std::string> distinct;
      for (uint32_t i = 0; i < count; ++i) {
        if (!r.str(key, kTcpStoreMaxKeyBytes)) {
          drop(c, "malformed %s (key %u)", w.is_get ? "get" : "wait", i);
          return false;
        }
        distinct.insert(key);
      }
      if (!r.done()) {
        drop(c, "malformed %s (trailing bytes)", w.is_get ? "get" : "wait");
        return false;
      }
      const WaiterId wid{c.id, id};
      if (waiters.count(wid) != 0) {
        drop(c, "request id %llu reused while pending", static_cast<unsigned long long>(id));
        return false;
      }
      w.keys.assign(distinct.begin(), distinct.end());
      for (const std::string& k : w.keys) {
        if (data.count(k) == 0) {
          ++w.missing;
          waiting_on[k].push_back(wid);
        }
      }
      if (w.missing == 0) {
        finish_wait(wid, w);
      } else {
        waiters.emplace(wid, std::move(w));
      }
      return true;
    }
    case Msg::kCancel: {
      if (!r.done()) {
        drop(c, "malformed cancel");
        return false;
      }
      // Answers the cancelled wait (same id) with what is still missing; a wait that already
      // got its answer is not pending any more and the cancel is ignored.
      auto it = waiters.find(WaiterId{c.id, id});
      if (it == waiters.end()) return true;
      std::vector<std::string> missing;
      for (const std::string& k : it->second.keys) {
        if (data.count(k) == 0) missing.push_back(k);
      }
      unindex(it->first, it->second);
      waiters.erase(it);
      respond(c, id, StatusCode::kTimeout,
              "keys not set within the timeout: " + join_keys(missing));
      return true;
    }
    default:
      drop(c, "unknown request type %u", op);
      return false;
  }
}

bool TcpStoreServer::Impl::handle_frame(Conn& c, const uint8_t* body, size_t size) {
  FrameReader r(body, size);
  if (!c.authed) return handle_hello(c, r);
  return handle_request(c, r);
}

void TcpStoreServer::Impl::read_from(Conn& c) {
  size_t budget = kReadBudgetBytes;
  while (!c.dead && !c.closing && budget > 0) {
    // Small reads go through a scratch buffer, so an idle or trickling peer holds only the
    // bytes it sent; the rest of a large frame (whose length passed the limit check) is read
    // straight into the connection's buffer.
    size_t direct = 0;
    if (c.in.size() >= 4) {
      const size_t frame = 4 + static_cast<size_t>(frame_length(c.in.data()));
      if (frame > c.in.size() + kReadChunkBytes) direct = std::min(frame - c.in.size(), budget);
    }
    const size_t old = c.in.size();
    ssize_t n;
    if (direct > 0) {
      c.in.resize(old + direct);
      n = ::recv(c.fd.get(), c.in.data() + old, direct, MSG_DONTWAIT);
      c.in.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    } else {
      n = ::recv(c.fd.get(), scratch.data(), scratch.size(), MSG_DONTWAIT);
      if (n > 0) c.in.insert(c.in.end(), scratch.data(), scratch.data() + n);
    }
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      const char* cause = n == 0 ? "closed the connection" : strerror(errno);
      if (!c.in.empty()) {
        drop(c, "%s mid-frame (%zu bytes of an unfinished frame)", cause, c.in.size());
      } else {
        EC_DEBUG(kBoot, "%s: client %s left: %s", name.c_str(), c.peer.c_str(), cause);
        c.dead = true;
      }
      return;
    }
    c.in_progress = Clock::now();
    budget -= std::min(budget, static_cast<size_t>(n));
    // Handle every whole frame; check each length as soon as its header is in.
    size_t pos = 0;
    while (!c.dead && !c.closing && c.in.size() - pos >= 4) {
      const size_t len = frame_length(c.in.data() + pos);
      const size_t limit = c.authed ? kMaxRequestBody : kMaxHelloBody;
      if (len > limit) {
        drop(c, "sent a %zu-byte frame%s (limit %zu)", len, c.authed ? "" : " before its hello",
             limit);
        return;
      }
      if (c.in.size() - pos - 4 < len) break;
      handle_frame(c, c.in.data() + pos + 4, len);
      pos += 4 + len;
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
    // Do not keep a big value's buffer for every idle client.
    if (c.in.empty() && c.in.capacity() > (size_t{1} << 20)) c.in.shrink_to_fit();
  }
}

void TcpStoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the pending connection stays in the backlog, so stop
      // polling the listener for a moment instead of spinning on it.
      EC_WARN(kBoot, "%s: cannot accept a client: %s", name.c_str(), strerror(errno));
      accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    UniqueFd owned(fd);
    const std::string peer = sockaddr_text(addr);
    if (conns.size() >= options.max_connections) {
      EC_WARN(kBoot, "%s: refusing client %s: already %zu connections", name.c_str(), peer.c_str(),
              conns.size());
      continue;
    }
    set_nodelay(fd);
    auto c = std::make_unique<Conn>();
    c->id = next_conn_id++;
    c->fd = std::move(owned);
    c->peer = peer;
    c->opened = c->in_progress = c->out_progress = Clock::now();
    conns.emplace(c->id, std::move(c));
  }
}

// Drops connections past their deadlines; returns the next deadline to wake up for.
Clock::time_point TcpStoreServer::Impl::housekeeping(Clock::time_point now) {
  Clock::time_point next = kForever;
  const auto consider = [&](Clock::time_point deadline) { next = std::min(next, deadline); };
  for (auto& [id, c] : conns) {
    if (c->dead) continue;
    if (!c->authed) {
      const auto deadline = c->opened + options.handshake_timeout;
      if (now >= deadline) {
        drop(*c, "no hello within %lld ms",
             static_cast<long long>(options.handshake_timeout.count() / 1000000));
        continue;
      }
      consider(deadline);
    }
    if (!c->in.empty()) {
      const auto deadline = c->in_progress + options.stall_timeout;
      if (now >= deadline) {
        drop(*c, "stalled for %lld ms in the middle of a frame",
             static_cast<long long>(options.stall_timeout.count() / 1000000));
        continue;
      }
      consider(deadline);
    }
    if (!c->out.empty()) {
      const auto deadline = c->out_progress + options.stall_timeout;
      if (now >= deadline) {
        drop(*c, "has not read its answers (%zu bytes queued) for %lld ms", c->out_bytes,
             static_cast<long long>(options.stall_timeout.count() / 1000000));
        continue;
      }
      consider(deadline);
    }
  }
  if (accept_paused_until > now) consider(accept_paused_until);
  return next;
}

void TcpStoreServer::Impl::erase_dead() {
  for (auto it = conns.begin(); it != conns.end();) {
    if (!it->second->dead) {
      ++it;
      continue;
    }
    const uint64_t cid = it->first;
    auto w = waiters.lower_bound(WaiterId{cid, 0});
    while (w != waiters.end() && w->first.first == cid) {
      unindex(w->first, w->second);
      w = waiters.erase(w);
    }
    it = conns.erase(it);
  }
}

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<Conn*> polled;
  Clock::time_point next_deadline = kForever;
  while (!stop.load(std::memory_order_acquire)) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd.get(), POLLIN, 0});
    const bool accepting = Clock::now() >= accept_paused_until;
    fds.push_back({accepting ? listen_fd.get() : -1, POLLIN, 0});
    for (auto& [id, c] : conns) {
      short events = 0;
      if (!c->closing && c->out_bytes < kPauseReadBytes) events |= POLLIN;
      if (!c->out.empty()) events |= POLLOUT;
      fds.push_back({c->fd.get(), events, 0});
      polled.push_back(c.get());
    }
    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(next_deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      EC_ERROR(kBoot, "%s: poll failed: %m", name.c_str());
      ::usleep(10000);
      continue;
    }
    if (fds[0].revents != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = ::read(wake_fd.get(), &count, sizeof(count));
      continue;  // the loop condition sees the stop request
    }
    if (fds[1].revents != 0) accept_all();
    for (size_t i = 0; i < polled.size(); ++i) {
      Conn& c = *polled[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0 || c.dead) continue;
      if (ev & POLLOUT) flush(c);
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        if (fds[i + 2].events & POLLIN) {
          read_from(c);
        } else if (ev & (POLLHUP | POLLERR)) {
          flush(c);  // not reading: sending reports the failure
          if (!c.dead && !c.out.empty() && (ev & POLLERR)) drop(c, "socket error");
        }
      }
    }
    next_deadline = housekeeping(Clock::now());
    erase_dead();
  }
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl, uint16_t port)
    : impl_(std::move(impl)), port_(port) {
  thread_ = std::thread([impl = impl_.get()] { impl->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stop.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(impl_->wake_fd.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  EC_DEBUG(kBoot, "%s: stopped", impl_->name.c_str());
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& bind_addr,
                                                              uint16_t port,
                                                              const std::string& token) {
  return start(bind_addr, port, token, Options{});
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& bind_addr,
                                                              uint16_t port,
                                                              const std::string& token,
                                                              const Options& options) {
  if (token.size() > kTcpStoreMaxTokenBytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "store: job token of %zu bytes is longer than %zu", token.size(),
                       kTcpStoreMaxTokenBytes);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (bind_addr.empty() || bind_addr == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(bind_addr.c_str(), nullptr, &hints, &found);
    if (rc != 0 || found == nullptr) {
      Status s =
          make_status(StatusCode::kInvalidArgument, "store: cannot resolve bind address '%s': %s",
                      bind_addr.c_str(), rc != 0 ? gai_strerror(rc) : "no IPv4 address");
      EC_ERROR(kBoot, "%s", s.message().c_str());
      return s;
    }
    addr.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
    ::freeaddrinfo(found);
  }
  const std::string where = sockaddr_text(addr);
  auto io_error = [&where](const char* what) {
    Status s =
        make_status(StatusCode::kIoError, "store %s: %s: %s", where.c_str(), what, strerror(errno));
    EC_ERROR(kBoot, "%s", s.message().c_str());
    return s;
  };
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return io_error("cannot create a socket");
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return io_error("cannot bind");
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) return io_error("cannot listen");
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return io_error("cannot read the bound port");
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return io_error("cannot create an eventfd");

  auto impl = std::make_unique<Impl>();
  impl->listen_fd = std::move(fd);
  impl->wake_fd = std::move(wake);
  impl->token = token;
  impl->options = options;
  addr.sin_port = bound.sin_port;
  impl->name = "store " + sockaddr_text(addr);
  EC_INFO(kBoot, "%s: listening%s", impl->name.c_str(),
          token.empty() ? " without a job token (any client is accepted)" : "");
  const uint16_t bound_port = ntohs(bound.sin_port);
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl), bound_port));
}

}  // namespace eagercomm
