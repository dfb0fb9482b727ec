// The TCP bootstrap store: the Store semantics (same as HashStore), connection set-up and job
// tokens, robustness against peers that send garbage or stall, a server that goes away, and
// processes sharing one store.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/tcp_store.h"

namespace eagercomm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<TcpStoreServer> start_server(const std::string& token = "tok",
                                             TcpStoreServer::Options options = {}) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, token, options);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

std::unique_ptr<TcpStore> client(uint16_t port, const std::string& token = "tok") {
  auto store = TcpStore::connect("127.0.0.1", port, token, 30s);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  return store.ok() ? std::move(store).value() : nullptr;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- raw peers speaking (or not) the wire protocol ----

int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  return fd;
}

void put_le(std::vector<uint8_t>& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A frame: u32 body length, then the body.
std::vector<uint8_t> frame(const std::vector<uint8_t>& body) {
  std::vector<uint8_t> f;
  put_le(f, body.size(), 4);
  f.insert(f.end(), body.begin(), body.end());
  return f;
}

std::vector<uint8_t> hello_body(const std::string& token, uint16_t version = 1) {
  std::vector<uint8_t> b{1};  // kHello
  put_le(b, 0x54534345, 4);   // "ECST"
  put_le(b, version, 2);
  put_le(b, 0, 2);
  put_le(b, token.size(), 4);
  b.insert(b.end(), token.begin(), token.end());
  return b;
}

void send_bytes(int fd, const std::vector<uint8_t>& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads until the peer closes; true if it did within `timeout` (whatever it sent first).
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  uint8_t buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

// A raw peer that said a correct hello and read the acceptance.
int raw_authed(uint16_t port, const std::string& token = "tok") {
  const int fd = raw_connect(port);
  send_bytes(fd, frame(hello_body(token)));
  uint8_t reply[64];
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 10000), 1);
  EXPECT_GT(::recv(fd, reply, sizeof(reply), 0), 4);
  return fd;
}

// ---- the Store contract ----

TEST(TcpStore, SetGetReplace) {
  auto server = start_server();
  auto s = client(server->port());
  ASSERT_TRUE(s->set("k", to_bytes("one")).ok());
  EXPECT_EQ(to_string(s->get("k", 1s).value()), "one");
  ASSERT_TRUE(s->set("k", to_bytes("two")).ok());
  EXPECT_EQ(to_string(s->get("k", 1s).value()), "two");
  ASSERT_TRUE(s->set("", {}).ok());  // empty key and empty value are fine
  EXPECT_TRUE(s->get("", 1s).value().empty());
  EXPECT_TRUE(s->wait({}, 1ms).ok());
  // A big value makes the trip intact.
  Bytes big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + (i >> 13));
  ASSERT_TRUE(s->set("big", big).ok());
  EXPECT_EQ(s->get("big", 10s).value(), big);
}

TEST(TcpStore, GetAndWaitWaitForALaterSetFromAnotherClient) {
  auto server = start_server();
  auto waiter = client(server->port());
  auto setter = client(server->port());
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(setter->set("late", to_bytes("here")).ok());
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(setter->set("later", to_bytes("too")).ok());
  });
  auto v = waiter->get("late", 30s);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(to_string(v.value()), "here");
  EXPECT_TRUE(waiter->wait({"late", "later"}, 0ns).ok());  // 0: forever
  t.join();
}

TEST(TcpStore, TimeoutNamesTheMissingKeysAndTheClientStaysUsable) {
  auto server = start_server();
  auto s = client(server->port());
  ASSERT_TRUE(s->set("a", {}).ok());
  const auto start = Clock::now();
  Status st = s->wait({"a", "b", "c"}, 100ms);
  EXPECT_LT(Clock::now() - start, 5s) << "the client must honour its own timeout";
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_TRUE(contains(st.message(), "b, c")) << st.message();
  EXPECT_FALSE(contains(st.message(), "a,")) << st.message();
  Result<Bytes> g = s->get("nope", 20ms);
  EXPECT_EQ(g.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(contains(g.status().message(), "nope")) << g.status().message();
  // The cancelled waits left nothing behind: later calls get their own answers.
  ASSERT_TRUE(s->set("nope", to_bytes("now")).ok());
  ASSERT_TRUE(s->set("b", to_bytes("B")).ok());
  EXPECT_EQ(to_string(s->get("nope", 1s).value()), "now");
  EXPECT_EQ(to_string(s->get("b", 1s).value()), "B");
  EXPECT_EQ(s->wait({"c"}, 20ms).code(), StatusCode::kTimeout);
}

TEST(TcpStore, AddIsAtomicAcrossClientThreads) {
  auto server = start_server();
  constexpr int kThreads = 4, kAdds = 1000;
  std::vector<std::thread> t;
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    t.emplace_back([&] {
      auto s = client(server->port());
      for (int j = 0; j < kAdds; ++j) {
        if (!s || !s->add("n", 1).ok()) failures.fetch_add(1);
      }
    });
  }
  // And the same on one shared client (calls serialized on its connection).
  auto shared = client(server->port());
  std::vector<std::thread> u;
  for (int i = 0; i < kThreads; ++i) {
    u.emplace_back([&] {
      for (int j = 0; j < kAdds; ++j) {
        if (!shared->add("m", 2).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& x : t) x.join();
  for (auto& x : u) x.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(shared->add("n", 0).value(), kThreads * kAdds);
  EXPECT_EQ(shared->add("m", 0).value(), 2 * kThreads * kAdds);
  EXPECT_EQ(shared->add("n", -kThreads * kAdds).value(), 0);
  ASSERT_TRUE(shared->set("text", to_bytes("abc")).ok());
  Result<int64_t> bad = shared->add("text", 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "text")) << bad.status().message();
  EXPECT_EQ(shared->add("n", 5).value(), 5);  // still usable after an error answer
}

TEST(TcpStore, ManyClientsRendezvous) {
  auto server = start_server();
  constexpr int kClients = 24;
  std::vector<std::thread> t;
  std::atomic<int> ok{0};
  for (int i = 0; i < kClients; ++i) {
    t.emplace_back([&, i] {
      auto s = client(server->port());
      if (!s) return;
      if (!s->set("rank/" + std::to_string(i), to_bytes(std::to_string(i * i))).ok()) return;
      std::vector<std::string> keys;
      for (int k = 0; k < kClients; ++k) keys.push_back("rank/" + std::to_string(k));
      if (!s->wait(keys, 60s).ok()) return;
      for (int k = 0; k < kClients; ++k) {
        auto v = s->get(keys[k], 1s);
        if (!v.ok() || to_string(v.value()) != std::to_string(k * k)) return;
      }
      ok.fetch_add(1);
    });
  }
  for (auto& x : t) x.join();
  EXPECT_EQ(ok.load(), kClients);
}

TEST(TcpStore, LimitsAreCheckedBeforeSending) {
  auto server = start_server();
  auto s = client(server->port());
  const std::string long_key(kTcpStoreMaxKeyBytes + 1, 'k');
  Status st = s->set(long_key, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "4097")) << st.message();
  EXPECT_EQ(s->get(long_key, 1s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->wait({"ok", long_key}, 1s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->add(long_key, 1).status().code(), StatusCode::kInvalidArgument);
  const std::vector<std::string> too_many(kTcpStoreMaxWaitKeys + 1, "k");
  EXPECT_EQ(s->wait(too_many, 1s).code(), StatusCode::kInvalidArgument);
  // Negative timeouts other than -1 (store.h's rule), before anything is sent.
  EXPECT_EQ(s->get("k", -2ns).status().code(), StatusCode::kInvalidArgument);
  st = s->wait({"k"}, -1s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "negative")) << st.message();
  st = s->set("v", Bytes(kTcpStoreMaxValueBytes + 1));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "'v'")) << st.message();
  EXPECT_TRUE(s->set("fine", to_bytes("x")).ok());  // the connection is untouched
  // The largest value allowed makes the trip: 64 MiB each way, which took more than the 30 s
  // I/O limit of client() under TSan on a loaded 2-core machine, so this client allows 300 s.
  auto patient = TcpStore::connect("127.0.0.1", server->port(), "tok", 300s);
  ASSERT_TRUE(patient.ok()) << patient.status().to_string();
  Bytes largest(kTcpStoreMaxValueBytes, 0x5a);
  largest.back() = 0xa5;
  st = patient.value()->set("largest", largest);
  ASSERT_TRUE(st.ok()) << st.to_string();
  Result<Bytes> got = patient.value()->get("largest", 300s);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), largest);
}

// ---- connecting ----

uint16_t free_port() {
  auto probe = TcpStoreServer::start("127.0.0.1", 0, "");
  EXPECT_TRUE(probe.ok());
  return probe.value()->port();  // released when probe is destroyed
}

TEST(TcpStore, ClientThatStartsFirstRetriesUntilTheServerIsUp) {
  const uint16_t port = free_port();
  Result<std::unique_ptr<TcpStore>> early = Status(StatusCode::kInternal, "not run");
  std::thread t([&] { early = TcpStore::connect("localhost", port, "tok", 30s); });
  std::this_thread::sleep_for(300ms);
  auto server = TcpStoreServer::start("0.0.0.0", port, "tok");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  t.join();
  ASSERT_TRUE(early.ok()) << early.status().to_string();
  EXPECT_TRUE(early.value()->set("x", to_bytes("y")).ok());
  EXPECT_EQ(early.value()->address(), "localhost:" + std::to_string(port));
}

TEST(TcpStore, UnreachableStoreIsATimeoutNamingTheAddress) {
  const uint16_t port = free_port();
  const auto start = Clock::now();
  auto s = TcpStore::connect("127.0.0.1", port, "tok", 300ms);
  EXPECT_LT(Clock::now() - start, 10s);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(contains(s.status().message(), "127.0.0.1:" + std::to_string(port)))
      << s.status().message();
  EXPECT_TRUE(contains(s.status().message(), "refused")) << s.status().message();

  auto bad_host = TcpStore::connect("no-such-host.invalid", 1234, "", 5s);
  EXPECT_EQ(bad_host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad_host.status().message(), "no-such-host.invalid"));
  EXPECT_EQ(TcpStore::connect("127.0.0.1", 0, "", 1s).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpStore::connect("", 80, "", 1s).status().code(), StatusCode::kInvalidArgument);
}

TEST(TcpStore, WrongTokenIsRefusedRightTokenAccepted) {
  auto server = start_server("secret-1");
  const std::string addr = "127.0.0.1:" + std::to_string(server->port());
  for (const std::string bad : {"secret-2", "", "secret-1x", "secret-"}) {
    auto s = TcpStore::connect("127.0.0.1", server->port(), bad, 10s);
    ASSERT_FALSE(s.ok()) << "token '" << bad << "' accepted";
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(s.status().message(), "job token was refused by the store at " + addr))
        << s.status().message();
  }
  auto good = TcpStore::connect("127.0.0.1", server->port(), "secret-1", 10s);
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_TRUE(good.value()->set("k", {}).ok());

  auto open = start_server("");  // no token: anyone is accepted
  EXPECT_TRUE(TcpStore::connect("127.0.0.1", open->port(), "", 10s).ok());
  EXPECT_TRUE(TcpStore::connect("127.0.0.1", open->port(), "whatever", 10s).ok());

  // A raw peer with a wrong token gets the refusal, then the server closes.
  const int fd = raw_connect(server->port());
  send_bytes(fd, frame(hello_body("nope")));
  EXPECT_TRUE(closed_by_peer(fd, 10s));
  ::close(fd);
}

TEST(TcpStore, SomethingElseThanAStoreIsAProtocolError) {
  // A server that answers every connection with an HTTP error.
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::thread http([&] {
    const int c = ::accept(lfd, nullptr, nullptr);
    const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ::send(c, reply, sizeof(reply) - 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(200ms);
    ::close(c);
  });
  auto s = TcpStore::connect("127.0.0.1", ntohs(addr.sin_port), "tok", 10s);
  http.join();
  ::close(lfd);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError) << s.status().to_string();
}

// ---- misbehaving peers ----

TEST(TcpStore, GarbageOversizedAndTruncatedFramesDoNotDisturbOtherClients) {
  auto server = start_server();
  const uint16_t port = server->port();
  auto good = client(port);
  auto other = client(port);
  // A wait in flight across all of it.
  Status pending = Status(StatusCode::kInternal, "not run");
  std::thread waiter([&] { pending = good->wait({"after-garbage"}, 60s); });

  // Not the protocol at all.
  int fd = raw_connect(port);
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  send_bytes(fd, std::vector<uint8_t>(http.begin(), http.end()));
  EXPECT_TRUE(closed_by_peer(fd, 10s)) << "garbage before the hello";
  ::close(fd);
  // A hello with the wrong magic.
  fd = raw_connect(port);
  std::vector<uint8_t> body = hello_body("tok");
  body[1] ^= 0xff;
  send_bytes(fd, frame(body));
  EXPECT_TRUE(closed_by_peer(fd, 10s)) << "bad magic";
  ::close(fd);
  // An authenticated peer announcing a 4 GiB frame.
  fd = raw_authed(port);
  send_bytes(fd, {0xff, 0xff, 0xff, 0xff, 10});
  EXPECT_TRUE(closed_by_peer(fd, 10s)) << "oversized length";
  ::close(fd);
  // A set whose value length says more than its frame holds.
  fd = raw_authed(port);
  body = {10};  // kSet
  put_le(body, 1, 8);
  put_le(body, 1, 4);
  body.push_back('k');
  put_le(body, 1000, 4);  // value length 1000, but no value bytes follow
  send_bytes(fd, frame(body));
  EXPECT_TRUE(closed_by_peer(fd, 10s)) << "inner length past the frame";
  ::close(fd);
  // An unknown request type.
  fd = raw_authed(port);
  body = {99};
  put_le(body, 1, 8);
  send_bytes(fd, frame(body));
  EXPECT_TRUE(closed_by_peer(fd, 10s)) << "unknown request";
  ::close(fd);
  // Closing mid-frame, and vanishing before the hello finished.
  fd = raw_authed(port);
  send_bytes(fd, {100, 0, 0, 0, 10, 1, 2, 3});
  ::close(fd);
  fd = raw_connect(port);
  send_bytes(fd, {20, 0, 0});
  ::close(fd);
  // A hello of another protocol version is answered, then closed.
  fd = raw_connect(port);
  send_bytes(fd, frame(hello_body("tok", 99)));
  EXPECT_TRUE(closed_by_peer(fd, 10s)) << "other version";
  ::close(fd);

  // Everybody else is fine.
  ASSERT_TRUE(other->set("after-garbage", to_bytes("still here")).ok());
  waiter.join();
  EXPECT_TRUE(pending.ok()) << pending.to_string();
  EXPECT_EQ(to_string(good->get("after-garbage", 5s).value()), "still here");
  EXPECT_EQ(other->add("count", 3).value(), 3);
  auto late = client(port);
  EXPECT_EQ(to_string(late->get("after-garbage", 5s).value()), "still here");
}

TEST(TcpStore, StalledAndSilentPeersAreDroppedWithoutBlockingOthers) {
  TcpStoreServer::Options options;
  options.handshake_timeout = 300ms;
  options.stall_timeout = 400ms;
  auto server = start_server("tok", options);
  const uint16_t port = server->port();
  const int silent = raw_connect(port);  // never says hello
  const int stalled = raw_authed(port);
  send_bytes(stalled, {64, 0, 0, 0, 10, 1});  // a frame it never finishes
  // While they hang around, others are served.
  auto s = client(port);
  ASSERT_TRUE(s->set("k", to_bytes("v")).ok());
  EXPECT_EQ(to_string(s->get("k", 5s).value()), "v");
  EXPECT_TRUE(closed_by_peer(silent, 20s)) << "no hello: must be dropped";
  EXPECT_TRUE(closed_by_peer(stalled, 20s)) << "stalled mid-frame: must be dropped";
  ::close(silent);
  ::close(stalled);
  // An idle authenticated client between frames is not stalled: it stays connected.
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(s->set("k2", {}).ok());
}

TEST(TcpStore, PeerThatStopsReadingItsAnswersIsDropped) {
  TcpStoreServer::Options options;
  options.stall_timeout = 400ms;
  auto server = start_server("tok", options);
  auto s = client(server->port());
  ASSERT_TRUE(s->set("big", Bytes(4 << 20, 1)).ok());
  // 20 gets of 4 MiB, never read: more than the server queues before it stops reading.
  const int fd = raw_authed(server->port());
  std::vector<uint8_t> requests;
  for (uint64_t id = 1; id <= 20; ++id) {
    std::vector<uint8_t> get{11};  // kGet
    put_le(get, id, 8);
    put_le(get, 3, 4);
    get.insert(get.end(), {'b', 'i', 'g'});
    const std::vector<uint8_t> f = frame(get);
    requests.insert(requests.end(), f.begin(), f.end());
  }
  send_bytes(fd, requests);
  // Meanwhile the others are served (slowly under TSan while the server queues 80 MiB for the
  // raw peer: 10 s was once too short there).
  EXPECT_TRUE(s->set("k", to_bytes("v")).ok());
  Result<Bytes> big = s->get("big", 120s);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(big.value().size(), size_t{4} << 20);
  std::this_thread::sleep_for(2s);  // past the stall timeout, reading nothing
  EXPECT_TRUE(closed_by_peer(fd, 20s)) << "a peer not reading its answers must be dropped";
  ::close(fd);
  Result<Bytes> k = s->get("k", 60s);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(to_string(k.value()), "v");
}

TEST(TcpStore, ConnectionLimitRefusesTheExtraClient) {
  TcpStoreServer::Options options;
  options.max_connections = 2;
  auto server = start_server("tok", options);
  auto a = client(server->port());
  auto b = client(server->port());
  auto c = TcpStore::connect("127.0.0.1", server->port(), "tok", 500ms);
  EXPECT_FALSE(c.ok());
  a.reset();  // frees a slot
  auto d = TcpStore::connect("127.0.0.1", server->port(), "tok", 30s);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
}

// ---- the store going away ----

TEST(TcpStore, ServerDestroyedWhileAClientWaitsFailsThePendingCallPromptly) {
  auto server = start_server();
  const std::string addr = "127.0.0.1:" + std::to_string(server->port());
  auto s = client(server->port());
  Status st;
  Clock::duration took{};
  std::thread t([&] {
    const auto start = Clock::now();
    st = s->wait({"never"}, 120s);
    took = Clock::now() - start;
  });
  std::this_thread::sleep_for(200ms);
  server.reset();
  t.join();
  EXPECT_LT(took, 30s) << "the waiter must not sit out its timeout";
  EXPECT_EQ(st.code(), StatusCode::kPeerFailed) << st.to_string();
  EXPECT_TRUE(contains(st.message(), addr)) << st.message();
  // Every later call fails the same way, at once.
  EXPECT_EQ(s->set("x", {}).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s->get("x", 60s).status().code(), StatusCode::kPeerFailed);
}

TEST(TcpStore, BindErrorsNameTheAddress) {
  auto server = start_server();
  auto again = TcpStoreServer::start("127.0.0.1", server->port(), "");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(contains(again.status().message(), std::to_string(server->port())))
      << again.status().message();
  auto bad = TcpStoreServer::start("no-such-host.invalid", 0, "");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// ---- processes ----

TEST(TcpStore, ForkedProcessesShareTheParentsStore) {
  auto server = start_server("proc-token");
  const uint16_t port = server->port();
  constexpr int kChildren = 3, kAdds = 100;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto s = TcpStore::connect("127.0.0.1", port, "proc-token", 30s);
      if (!s.ok()) _exit(2);
      for (int i = 0; i < kAdds; ++i) {
        if (!s.value()->add("counter", 1).ok()) _exit(3);
      }
      if (!s.value()->set("child/" + std::to_string(c), to_bytes(std::to_string(getpid()))).ok()) {
        _exit(4);
      }
      std::vector<std::string> keys;
      for (int k = 0; k < kChildren; ++k) keys.push_back("child/" + std::to_string(k));
      if (!s.value()->wait(keys, 60s).ok()) _exit(5);
      _exit(s.value()->wait({"parent/go"}, 60s).ok() ? 0 : 6);
    }
    pids.push_back(pid);
  }
  auto s = client(port, "proc-token");
  for (int c = 0; c < kChildren; ++c) {
    auto v = s->get("child/" + std::to_string(c), 60s);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(to_string(v.value()), std::to_string(pids[c]));
  }
  ASSERT_TRUE(s->set("parent/go", {}).ok());
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  EXPECT_EQ(s->add("counter", 0).value(), kChildren * kAdds);
}

}  // namespace
}  // namespace eagercomm
