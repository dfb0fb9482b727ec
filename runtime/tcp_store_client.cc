// TcpStore: one blocking connection to the bootstrap store; see tcp_store.h for the protocol
// and the limits, tcp_store_wire.h for the frames.
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
  EC_RETURN_IF_ERROR(check_store_timeout(timeout));
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
  EC_RETURN_IF_ERROR(check_store_timeout(timeout));
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
