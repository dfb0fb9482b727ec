// The bootstrap store over TCP: one server per job (rank 0 or the launcher runs it), one client
// per process. It is how ranks on different hosts, or in different processes of one host, find
// each other before any transport is connected.
//
// Protocol (version 1): every message is a frame, a little-endian u32 body length followed by
// the body. The client's first frame is a hello (magic "ECST", protocol version, job token);
// the server answers accepted, refused (wrong token: it then closes) or unsupported version.
// Then each request (set, get, add, wait, cancel) carries a 64-bit id and gets exactly one
// response with that id, except cancel, which makes the server answer the wait it names at
// once (a timeout listing the keys still missing). get() and wait() are served by the server:
// it holds a waiting request and answers it when its keys appear, so waiting costs no polling.
//
// Limits the server enforces on anything a peer sends (kMax* below): a bad frame, a frame
// before a hello bigger than a hello can be, a peer that stalls mid-frame, stops reading its
// answers or never says hello in time is disconnected and logged (EC_WARN boot) and never
// blocks or crashes the server or disturbs its other clients.
//
// Security: the token keeps other jobs and stray connections out; it is sent in clear text, so
// it is no defence against someone who can watch the network. An empty token accepts anyone
// who can reach the port (see launch_env.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/status.h"
#include "runtime/store.h"

namespace eagercomm {

inline constexpr size_t kTcpStoreMaxKeyBytes = 4096;
inline constexpr size_t kTcpStoreMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kTcpStoreMaxTokenBytes = 4096;
inline constexpr size_t kTcpStoreMaxWaitKeys = 65536;

// Serves a key-value store to the ranks of one job from one background thread (poll(), no
// thread per client). Thread-safety: port() may be called from any thread; destruction must not
// race with other calls on the object.
class TcpStoreServer {
 public:
  struct Options {
    // A connection that has not said hello within this long is dropped.
    std::chrono::nanoseconds handshake_timeout = std::chrono::seconds(10);
    // A connection that started a frame (or has answers queued) and made no progress on it for
    // this long is dropped: a vanished host must not pin a buffer forever.
    std::chrono::nanoseconds stall_timeout = std::chrono::seconds(60);
    // Connections beyond this are accepted and closed at once (logged).
    size_t max_connections = 16384;
  };

  // Listens on bind_addr:port (bind_addr "" or "0.0.0.0": every interface; a host name is
  // resolved, IPv4 only; port 0: a free port) and serves until destroyed. Clients must present
  // `token`; an empty token accepts every client. Errors: kInvalidArgument for an address that
  // does not resolve, kIoError (with the cause) when the socket cannot be bound.
  static Result<std::unique_ptr<TcpStoreServer>> start(const std::string& bind_addr, uint16_t port,
                                                       const std::string& token);
  static Result<std::unique_ptr<TcpStoreServer>> start(const std::string& bind_addr, uint16_t port,
                                                       const std::string& token,
                                                       const Options& options);

  // Stops the thread and closes every connection: clients see the store go away at once.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port the server listens on (the chosen one when started with port 0).
  uint16_t port() const { return port_; }

  struct Impl;

 private:
  TcpStoreServer(std::unique_ptr<Impl> impl, uint16_t port);
  std::unique_ptr<Impl> impl_;
  uint16_t port_;
  std::thread thread_;
};

// A client of a TcpStoreServer, with the Store semantics of store.h exactly (timeouts as
// check_store_timeout says; timeout errors name the missing keys). Thread-safe: calls are
// serialized on one connection, so a thread in a long wait() holds up the others' calls on the same
// client (use a second client when one thread must set what another waits for).
//
// get() and wait() end at their own timeout even when the server does not answer. set() and
// add() wait for the server's answer at most as long as the connect timeout. When the server
// goes away (closed, crashed, reset), the pending call and every later one fail with kPeerFailed
// naming the store address; there is no reconnection.
class TcpStore final : public Store {
 public:
  // Connects to host:port, retrying until `timeout` passes (the server may not be up yet), and
  // presents `token`. Errors: kTimeout naming host:port and the last cause when it is not
  // reachable in time; kInvalidArgument when the job token is refused or the host does not
  // resolve; kProtocolError when something else than an eagercomm store answers.
  static Result<std::unique_ptr<TcpStore>> connect(const std::string& host, uint16_t port,
                                                   const std::string& token,
                                                   std::chrono::nanoseconds timeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  // Keys longer than kTcpStoreMaxKeyBytes, values longer than kTcpStoreMaxValueBytes and waits
  // on more than kTcpStoreMaxWaitKeys keys are kInvalidArgument (nothing is sent).
  Status set(const std::string& key, const Bytes& value) override;
  Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) override;

  // "host:port", as used in error messages.
  const std::string& address() const { return address_; }

  struct Connection;

 private:
  TcpStore(std::unique_ptr<Connection> conn, std::string address,
           std::chrono::nanoseconds io_timeout);
  std::mutex mu_;  // serializes calls: bootstrap is not a data path
  std::unique_ptr<Connection> conn_;
  const std::string address_;
  const std::chrono::nanoseconds io_timeout_;
};

}  // namespace eagercomm
