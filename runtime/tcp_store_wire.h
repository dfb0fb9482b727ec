// The bootstrap store's wire format, shared by its server (tcp_store_server.cc) and client
// (tcp_store_client.cc): message types, size limits, frames and their encoding. Internal to
// runtime/; the protocol itself is described in tcp_store.h.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.h"
#include "runtime/tcp_store.h"

namespace eagercomm::tcp_store_wire {

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

inline std::string sockaddr_text(const sockaddr_in& addr) {
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

inline void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Compares in time independent of where the strings differ (the token is a secret).
inline bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

// "a, b, c", stopping near kMaxListedBytes with "... (N more)".
inline std::string join_keys(const std::vector<std::string>& keys) {
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

inline uint32_t frame_length(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// Reads the counter a value holds: empty is 0, 8 bytes are an int64, anything else is not one.
inline bool counter_of(const Bytes& b, int64_t& value) {
  value = 0;
  if (b.empty()) return true;
  if (b.size() != sizeof(int64_t)) return false;
  std::memcpy(&value, b.data(), sizeof(value));
  return true;
}

}  // namespace eagercomm::tcp_store_wire
