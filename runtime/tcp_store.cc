// TcpStoreServer (one poll() thread) and TcpStore (one blocking connection) over a small
// length-prefixed binary protocol; see tcp_store.h for the protocol and the limits.
#include "runtime/tcp_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#include "runtime/config.h"
#include "runtime/deadline.h"
#include "runtime/log.h"
#include "runtime/unique_fd.h"

namespace eagercomm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

// "ECST" as bytes on the wire (little-endian u32).
constexpr uint32_t kMagic = 0x54534345;
constexpr uint16_t kProtocolVersion = 1;

enum class Msg : uint8_t {
  kHello = 1,
  kHelloReply = 2,
  kSet = 10,
  kGet = 11,
  kAdd = 12,
  kWait = 13,
  kCancel = 14,
  kResponse = 20,
};
enum class HelloResult : uint8_t { kAccepted = 0, kRefused = 1, kBadVersion = 2 };

// The largest bodies either side accepts. Before its hello a peer can only send a hello, so an
// unauthenticated stranger can never make the server buffer more than a few KiB.
constexpr size_t kMaxHelloBody = 1 + 4 + 2 + 2 + 4 + kTcpStoreMaxTokenBytes;
constexpr size_t kMaxRequestBody = 1 + 8 + 4 + kTcpStoreMaxKeyBytes + 4 + kTcpStoreMaxValueBytes;
// Responses: a value, or a message (timeout messages are capped at kMaxListedBytes).
constexpr size_t kMaxResponseBody = kMaxRequestBody + 64 * 1024;
constexpr size_t kMaxListedBytes = 16 * 1024;

// The server stops reading a connection whose unsent answers pass kPauseReadBytes, and drops it
// past kMaxQueuedBytes (answers to waits it registered before the pause can still arrive).
constexpr size_t kPauseReadBytes = size_t{64} << 20;
constexpr size_t kMaxQueuedBytes = size_t{1} << 30;
// Most bytes read from one connection per poll round, so one big sender cannot starve others.
constexpr size_t kReadBudgetBytes = size_t{4} << 20;
constexpr size_t kReadChunkBytes = 64 * 1024;

// After a client's own deadline passes it cancels the wait; this long for the server's answer.
constexpr nanoseconds kCancelGrace = std::chrono::seconds(2);
// A hello always gets at least this long, even when the connect deadline is nearly spent.
constexpr nanoseconds kMinHelloTime = std::chrono::seconds(1);

// ---- small RAII and I/O helpers ----

// Milliseconds for poll() until `deadline` (rounded up; -1 for "never").
int poll_timeout_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = deadline - Clock::now();
  if (left <= nanoseconds::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

std::string sockaddr_text(const sockaddr_in& addr) {
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Compares in time independent of where the strings differ (the token is a secret).
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

// "a, b, c", stopping near kMaxListedBytes with "... (N more)".
std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out.size() > kMaxListedBytes) {
      out += ", ... (" + std::to_string(keys.size() - i) + " more)";
      break;
    }
    if (!out.empty()) out += ", ";
    out += keys[i];
  }
  return out;
}

// ---- frames ----

// Builds one frame: u32 length (patched by finish()), then the body, little-endian throughout.
class FrameWriter {
 public:
  explicit FrameWriter(Msg type) {
    buf_.resize(4);
    u8(static_cast<uint8_t>(type));
  }
  void u8(uint8_t v) { buf_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void blob(const void* data, size_t n) {
    u32(static_cast<uint32_t>(n));
    const auto* p = static_cast<const uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + n);
  }
  void str(std::string_view s) { blob(s.data(), s.size()); }
  std::vector<uint8_t> finish() && {
    const auto body = static_cast<uint32_t>(buf_.size() - 4);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(body >> (8 * i));
    return std::move(buf_);
  }

 private:
  void put(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> buf_;
};

// Reads a body; every accessor fails (returns false) instead of reading past the end.
class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool u8(uint8_t& v) {
    uint64_t x;
    if (!get(x, 1)) return false;
    v = static_cast<uint8_t>(x);
    return true;
  }
  bool u16(uint16_t& v) {
    uint64_t x;
    if (!get(x, 2)) return false;
    v = static_cast<uint16_t>(x);
    return true;
  }
  bool u32(uint32_t& v) {
    uint64_t x;
    if (!get(x, 4)) return false;
    v = static_cast<uint32_t>(x);
    return true;
  }
  bool u64(uint64_t& v) { return get(v, 8); }
  // A u32-length-prefixed byte string of at most `max` bytes.
  bool str(std::string& out, size_t max) {
    const uint8_t* p;
    size_t n;
    if (!span(p, n, max)) return false;
    out.assign(reinterpret_cast<const char*>(p), n);
    return true;
  }
  bool blob(Bytes& out, size_t max) {
    const uint8_t* p;
    size_t n;
    if (!span(p, n, max)) return false;
    out.assign(p, p + n);
    return true;
  }
  bool done() const { return pos_ == n_; }

 private:
  bool get(uint64_t& v, int bytes) {
    if (n_ - pos_ < static_cast<size_t>(bytes)) return false;
    v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(bytes);
    return true;
  }
  bool span(const uint8_t*& p, size_t& n, size_t max) {
    uint32_t len;
    if (!u32(len) || len > max || n_ - pos_ < len) return false;
    p = p_ + pos_;
    n = len;
    pos_ += len;
    return true;
  }
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

uint32_t frame_length(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Reads the counter a value holds: empty is 0, 8 bytes are an int64, anything else is not one.
bool counter_of(const Bytes& b, int64_t& value) {
  value = 0;
  if (b.empty()) return true;
  if (b.size() != sizeof(int64_t)) return false;
  std::memcpy(&value, b.data(), sizeof(value));
  return true;
}

}  // namespace

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
  Clock::time_point next = Clock::time_point::max();
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
  Clock::time_point next_deadline = Clock::time_point::max();
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

// ======================================= client =======================================

struct TcpStore::Connection {
  UniqueFd fd;
  std::string address;       // "host:port"
  std::vector<uint8_t> in;   // bytes received, not yet a whole frame
  bool eof = false;          // the store closed its end (frames before that still count)
  bool established = false;  // hello accepted: from then on a lost connection is logged
  uint64_t next_id = 1;
  Status broken;  // ok while the connection is usable

  // Marks the connection unusable (logging the first cause) and returns the status.
  Status fail(Status s) {
    if (broken.ok()) {
      if (established) EC_ERROR(kBoot, "%s", s.message().c_str());
      broken = s;
    }
    return broken;
  }
  Status lost(const char* how) {
    return fail(make_status(StatusCode::kPeerFailed, "store at %s %s", address.c_str(), how));
  }
  Status closed() { return lost("closed the connection (the store's process may have exited)"); }
  // The same departure when the store's process exited with data of ours unread: the kernel
  // answers with a reset instead of an orderly close.
  Status reset() { return lost("reset the connection (the store's process may have exited)"); }

  // Reads what is available into `in` (up to the store's end of the stream: `eof`). Returns an
  // error (marking the connection broken) when the connection was reset or failed.
  Status read_some() {
    while (!eof) {
      const size_t old = in.size();
      in.resize(old + kReadChunkBytes);
      const ssize_t n = ::recv(fd.get(), in.data() + old, kReadChunkBytes, MSG_DONTWAIT);
      if (n > 0) {
        in.resize(old + static_cast<size_t>(n));
        continue;
      }
      in.resize(old);
      if (n == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ECONNRESET || errno == EPIPE) return reset();
      return fail(make_status(StatusCode::kIoError, "store at %s: receive failed: %s",
                              address.c_str(), strerror(errno)));
    }
    return Status::Ok();
  }

  // Sends a whole frame by `deadline`, reading meanwhile so that neither side can block the
  // other with full buffers. A send cut short leaves half a frame on the wire: broken.
  Status send_frame(const std::vector<uint8_t>& frame, Clock::time_point deadline) {
    if (!broken.ok()) return broken;
    if (eof) return closed();
    size_t sent = 0;
    while (sent < frame.size()) {
      const ssize_t n =
          ::send(fd.get(), frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        if (errno == EPIPE || errno == ECONNRESET) return reset();
        return fail(make_status(StatusCode::kIoError, "store at %s: send failed: %s",
                                address.c_str(), strerror(errno)));
      }
      pollfd p{fd.get(), POLLOUT | POLLIN, 0};
      const int r = ::poll(&p, 1, poll_timeout_ms(deadline));
      if (r < 0 && errno != EINTR) {
        return fail(make_status(StatusCode::kIoError, "store at %s: poll failed: %s",
                                address.c_str(), strerror(errno)));
      }
      if (r == 0) {
        return fail(make_status(StatusCode::kTimeout,
                                "store at %s: a request could not be sent in time",
                                address.c_str()));
      }
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        EC_RETURN_IF_ERROR(read_some());
        if (eof) return closed();
      }
    }
    return Status::Ok();
  }

  // The next whole frame's body, waiting until `deadline`. kTimeout (connection still usable)
  // when none came in time.
  Result<std::vector<uint8_t>> recv_frame(Clock::time_point deadline) {
    if (!broken.ok()) return broken;
    for (;;) {
      if (in.size() >= 4) {
        const size_t len = frame_length(in.data());
        if (len > kMaxResponseBody) {
          return fail(make_status(StatusCode::kProtocolError,
                                  "store at %s sent a %zu-byte frame (limit %zu)", address.c_str(),
                                  len, kMaxResponseBody));
        }
        if (in.size() - 4 >= len) {
          std::vector<uint8_t> body(in.begin() + 4, in.begin() + 4 + static_cast<long>(len));
          in.erase(in.begin(), in.begin() + 4 + static_cast<long>(len));
          return body;
        }
      }
      if (eof) return closed();
      pollfd p{fd.get(), POLLIN, 0};
      const int r = ::poll(&p, 1, poll_timeout_ms(deadline));
      if (r < 0) {
        if (errno == EINTR) continue;
        return fail(make_status(StatusCode::kIoError, "store at %s: poll failed: %s",
                                address.c_str(), strerror(errno)));
      }
      if (r == 0) {
        return make_status(StatusCode::kTimeout, "store at %s: no answer in time", address.c_str());
      }
      EC_RETURN_IF_ERROR(read_some());
    }
  }
};

namespace {

// One response to this client's request: its status, and where its payload starts.
struct Response {
  std::vector<uint8_t> body;
  StatusCode code = StatusCode::kOk;
  std::string message;
  size_t payload = 0;  // offset of the payload in body
};

}  // namespace

TcpStore::TcpStore(std::unique_ptr<Connection> conn, std::string address, nanoseconds io_timeout)
    : conn_(std::move(conn)), address_(std::move(address)), io_timeout_(io_timeout) {}

TcpStore::~TcpStore() = default;

namespace {

// Sends `frame` (request `id`) and returns its response, waiting until `deadline`. On kTimeout
// with a still usable connection the request may still be pending at the server.
Result<Response> round_trip(TcpStore::Connection& c, const std::vector<uint8_t>& frame, uint64_t id,
                            Clock::time_point send_deadline, Clock::time_point deadline);

Result<Response> await_response(TcpStore::Connection& c, uint64_t id, Clock::time_point deadline) {
  for (;;) {
    EC_ASSIGN_OR_RETURN(std::vector<uint8_t> body, c.recv_frame(deadline));
    FrameReader r(body.data(), body.size());
    uint8_t type = 0, code = 0;
    uint64_t got = 0;
    if (!r.u8(type) || type != static_cast<uint8_t>(Msg::kResponse) || !r.u64(got) || !r.u8(code) ||
        !is_valid_status_code(code)) {
      return c.fail(make_status(StatusCode::kProtocolError, "store at %s sent a malformed response",
                                c.address.c_str()));
    }
    if (got != id) continue;  // the late answer of a request that timed out
    Response resp;
    resp.code = static_cast<StatusCode>(code);
    if (resp.code != StatusCode::kOk && !r.str(resp.message, kMaxResponseBody)) {
      return c.fail(make_status(StatusCode::kProtocolError,
                                "store at %s sent a malformed error response", c.address.c_str()));
    }
    resp.payload = 1 + 8 + 1;  // after type, id and code
    resp.body = std::move(body);
    return resp;
  }
}

Result<Response> round_trip(TcpStore::Connection& c, const std::vector<uint8_t>& frame, uint64_t id,
                            Clock::time_point send_deadline, Clock::time_point deadline) {
  EC_RETURN_IF_ERROR(c.send_frame(frame, send_deadline));
  return await_response(c, id, deadline);
}

Status check_key(const std::string& key) {
  if (key.size() > kTcpStoreMaxKeyBytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "store key of %zu bytes is longer than the limit of %zu", key.size(),
                       kTcpStoreMaxKeyBytes);
  }
  return Status::Ok();
}

}  // namespace

Status TcpStore::set(const std::string& key, const Bytes& value) {
  EC_RETURN_IF_ERROR(check_key(key));
  if (value.size() > kTcpStoreMaxValueBytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "store value for key '%s' of %zu bytes is larger than the limit of %zu",
                       key.c_str(), value.size(), kTcpStoreMaxValueBytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = conn_->next_id++;
  FrameWriter w(Msg::kSet);
  w.u64(id);
  w.str(key);
  w.blob(value.data(), value.size());
  const auto deadline = deadline_after(io_timeout_);
  EC_ASSIGN_OR_RETURN(Response resp,
                      round_trip(*conn_, std::move(w).finish(), id, deadline, deadline));
  if (resp.code != StatusCode::kOk) return Status(resp.code, resp.message);
  return Status::Ok();
}

Result<int64_t> TcpStore::add(const std::string& key, int64_t delta) {
  EC_RETURN_IF_ERROR(check_key(key));
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = conn_->next_id++;
  FrameWriter w(Msg::kAdd);
  w.u64(id);
  w.str(key);
  w.u64(static_cast<uint64_t>(delta));
  const auto deadline = deadline_after(io_timeout_);
  EC_ASSIGN_OR_RETURN(Response resp,
                      round_trip(*conn_, std::move(w).finish(), id, deadline, deadline));
  if (resp.code != StatusCode::kOk) return Status(resp.code, resp.message);
  FrameReader r(resp.body.data() + resp.payload, resp.body.size() - resp.payload);
  uint64_t value = 0;
  if (!r.u64(value) || !r.done()) {
    return conn_->fail(make_status(StatusCode::kProtocolError,
                                   "store at %s sent a malformed add response", address_.c_str()));
  }
  return static_cast<int64_t>(value);
}

namespace {

// A get or wait: sent, awaited until the caller's deadline, then cancelled. The server answers
// a cancel with the keys still missing, which is what the timeout error names.
Result<Response> blocking_request(TcpStore::Connection& c, Msg op,
                                  const std::vector<std::string>& keys, nanoseconds timeout,
                                  nanoseconds io_timeout) {
  size_t body = 1 + 8 + 4;  // type, id, key count
  for (const std::string& k : keys) body += 4 + k.size();
  if (body > kMaxRequestBody) {
    return make_status(StatusCode::kInvalidArgument,
                       "store: a wait on %zu keys is too large a request (%zu bytes, limit %zu)",
                       keys.size(), body, kMaxRequestBody);
  }
  const auto deadline = deadline_after(timeout);
  const uint64_t id = c.next_id++;
  FrameWriter w(op);
  w.u64(id);
  if (op == Msg::kWait) w.u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) w.str(k);
  const std::vector<uint8_t> frame = std::move(w).finish();
  Result<Response> resp = round_trip(c, frame, id, deadline_after(io_timeout), deadline);
  if (resp.ok() || resp.status().code() != StatusCode::kTimeout || !c.broken.ok()) return resp;

  FrameWriter cancel(Msg::kCancel);
  cancel.u64(id);
  EC_RETURN_IF_ERROR(c.send_frame(std::move(cancel).finish(), deadline_after(io_timeout)));
  resp = await_response(c, id, Clock::now() + kCancelGrace);
  if (resp.ok() || !c.broken.ok()) return resp;
  // The store does not answer: name every key, since it cannot say which are missing.
  EC_WARN(kBoot, "store at %s did not answer a cancelled wait", c.address.c_str());
  return make_status(StatusCode::kTimeout,
                     "store at %s: keys not set within the timeout (the store did not answer): "
                     "%s",
                     c.address.c_str(), join_keys(keys).c_str());
}

}  // namespace

Result<Bytes> TcpStore::get(const std::string& key, nanoseconds timeout) {
  EC_RETURN_IF_ERROR(check_key(key));
  std::lock_guard<std::mutex> lock(mu_);
  EC_ASSIGN_OR_RETURN(Response resp,
                      blocking_request(*conn_, Msg::kGet, {key}, timeout, io_timeout_));
  if (resp.code != StatusCode::kOk) {
    return make_status(resp.code, "store at %s: %s", address_.c_str(), resp.message.c_str());
  }
  FrameReader r(resp.body.data() + resp.payload, resp.body.size() - resp.payload);
  Bytes value;
  if (!r.blob(value, kTcpStoreMaxValueBytes) || !r.done()) {
    return conn_->fail(make_status(StatusCode::kProtocolError,
                                   "store at %s sent a malformed get response", address_.c_str()));
  }
  return value;
}

Status TcpStore::wait(const std::vector<std::string>& keys, nanoseconds timeout) {
  if (keys.size() > kTcpStoreMaxWaitKeys) {
    return make_status(StatusCode::kInvalidArgument,
                       "store: a wait on %zu keys is more than the limit of %zu", keys.size(),
                       kTcpStoreMaxWaitKeys);
  }
  for (const std::string& k : keys) EC_RETURN_IF_ERROR(check_key(k));
  if (keys.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  EC_ASSIGN_OR_RETURN(Response resp,
                      blocking_request(*conn_, Msg::kWait, keys, timeout, io_timeout_));
  if (resp.code != StatusCode::kOk) {
    return make_status(resp.code, "store at %s: %s", address_.c_str(), resp.message.c_str());
  }
  return Status::Ok();
}

namespace {

// One TCP connection attempt to any address of host:port by `deadline`. `cause` gets why it
// failed; a non-ok Status means retrying cannot help (the host does not resolve).
Status try_connect(const std::string& host, uint16_t port, Clock::time_point deadline,
                   UniqueFd& out, std::string& cause) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    if (rc == EAI_AGAIN) {
      cause = std::string("name resolution: ") + gai_strerror(rc);
      return Status::Ok();
    }
    return make_status(StatusCode::kInvalidArgument, "store host '%s' does not resolve: %s",
                       host.c_str(), rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
  }
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      cause = std::string("socket: ") + strerror(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        int r;
        do {
          r = ::poll(&p, 1, poll_timeout_ms(deadline));
        } while (r < 0 && errno == EINTR);
        socklen_t len = sizeof(err);
        if (r == 0) {
          err = ETIMEDOUT;
        } else if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err == 0) {
      set_nodelay(fd.get());
      out = std::move(fd);
      break;
    }
    cause = strerror(err);
  }
  ::freeaddrinfo(found);
  return Status::Ok();
}

enum class HelloOutcome { kAccepted, kRetry };

// Says hello on a fresh connection. kRetry: the connection went away during the hello (the
// server may be restarting or at its connection limit); errors are final.
Result<HelloOutcome> say_hello(TcpStore::Connection& c, const std::string& token,
                               Clock::time_point deadline, std::string& cause) {
  FrameWriter w(Msg::kHello);
  w.u32(kMagic);
  w.u16(kProtocolVersion);
  w.u16(0);
  w.str(token);
  Result<std::vector<uint8_t>> body = [&]() -> Result<std::vector<uint8_t>> {
    EC_RETURN_IF_ERROR(c.send_frame(std::move(w).finish(), deadline));
    return c.recv_frame(deadline);
  }();
  if (!body.ok()) {
    if (body.status().code() == StatusCode::kPeerFailed) {
      cause = "the connection closed during the hello";
      return HelloOutcome::kRetry;
    }
    if (body.status().code() == StatusCode::kProtocolError) {
      return make_status(StatusCode::kProtocolError,
                         "%s is not an eagercomm store (is another program listening on that "
                         "port?): %s",
                         c.address.c_str(), body.status().message().c_str());
    }
    if (body.status().code() == StatusCode::kTimeout) {
      return make_status(StatusCode::kTimeout,
                         "%s accepted the connection but did not answer the hello in time (is "
                         "another program listening on that port?)",
                         c.address.c_str());
    }
    return body.status();
  }
  FrameReader r(body->data(), body->size());
  uint8_t type = 0, result = 0;
  uint32_t magic = 0;
  uint16_t version = 0;
  std::string message;
  if (!r.u8(type) || type != static_cast<uint8_t>(Msg::kHelloReply) || !r.u32(magic) ||
      magic != kMagic || !r.u16(version) || !r.u8(result) || !r.str(message, kMaxListedBytes)) {
    return make_status(StatusCode::kProtocolError,
                       "%s answered the hello with something else than an eagercomm store "
                       "reply (is another program listening on that port?)",
                       c.address.c_str());
  }
  switch (static_cast<HelloResult>(result)) {
    case HelloResult::kAccepted:
      return HelloOutcome::kAccepted;
    case HelloResult::kRefused:
      return make_status(StatusCode::kInvalidArgument,
                         "the job token was refused by the store at %s: give every rank the "
                         "job's EAGERCOMM_JOB_TOKEN (is this store another job's?)",
                         c.address.c_str());
    case HelloResult::kBadVersion:
      return make_status(StatusCode::kProtocolError, "store at %s refused the client: %s",
                         c.address.c_str(), message.c_str());
  }
  return make_status(StatusCode::kProtocolError, "store at %s sent an unknown hello result %u",
                     c.address.c_str(), result);
}

}  // namespace

Result<std::unique_ptr<TcpStore>> TcpStore::connect(const std::string& host, uint16_t port,
                                                    const std::string& token, nanoseconds timeout) {
  const std::string address = host + ":" + std::to_string(port);
  auto fail = [](Status s) {
    EC_ERROR(kBoot, "%s", s.message().c_str());
    return s;
  };
  if (host.empty()) {
    return fail(Status(StatusCode::kInvalidArgument, "store: empty host name"));
  }
  if (port == 0) {
    return fail(make_status(StatusCode::kInvalidArgument,
                            "store at %s: port 0 is not a port a store listens on",
                            address.c_str()));
  }
  if (token.size() > kTcpStoreMaxTokenBytes) {
    return fail(make_status(StatusCode::kInvalidArgument,
                            "store: job token of %zu bytes is longer than %zu", token.size(),
                            kTcpStoreMaxTokenBytes));
  }
  const auto deadline = deadline_after(timeout);
  auto pause = std::chrono::milliseconds(10);
  std::string cause = "no attempt finished";
  for (int attempt = 1;; ++attempt) {
    UniqueFd fd;
    Status resolved = try_connect(host, port, deadline, fd, cause);
    if (!resolved.ok()) return fail(resolved);
    if (fd.valid()) {
      auto conn = std::make_unique<Connection>();
      conn->fd = std::move(fd);
      conn->address = address;
      const auto hello_deadline = std::max(deadline, Clock::now() + kMinHelloTime);
      Result<HelloOutcome> hello = say_hello(*conn, token, hello_deadline, cause);
      if (!hello.ok()) return fail(hello.status());
      if (*hello == HelloOutcome::kAccepted) {
        conn->established = true;
        EC_DEBUG(kBoot, "store at %s: connected after %d attempt(s)", address.c_str(), attempt);
        return std::unique_ptr<TcpStore>(new TcpStore(std::move(conn), address, timeout));
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return fail(
          make_status(StatusCode::kTimeout, "store at %s not reachable within %s (%d attempts): %s",
                      address.c_str(), format_duration(timeout).c_str(), attempt, cause.c_str()));
    }
    std::this_thread::sleep_for(std::min<nanoseconds>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace eagercomm
