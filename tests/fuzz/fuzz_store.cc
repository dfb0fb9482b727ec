// libFuzzer target: the bootstrap store's server as a stranger on the network sees it. One
// server runs for the whole fuzzing session (empty token: every hello is accepted); each input
// is sent over a fresh TCP connection, after a valid hello when the first byte is odd (so that
// the request parser is reached), and the answer is read until the server closes or 20 ms pass.
// The server must survive everything (ASan and UBSan watch it) and keep answering.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/tcp_store.h"

namespace {

eagercomm::TcpStoreServer* server() {
  static std::unique_ptr<eagercomm::TcpStoreServer> s = [] {
    auto r = eagercomm::TcpStoreServer::start("127.0.0.1", 0, "");
    if (!r.ok()) std::abort();
    return std::move(r.value());
  }();
  return s.get();
}

// A hello frame of protocol version 1 with an empty token: u32 length, then type 1, magic
// "ECST", version, reserved, token length.
const uint8_t kHello[] = {13, 0, 0, 0, 1, 'E', 'C', 'S', 'T', 1, 0, 0, 0, 0, 0, 0, 0};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint16_t port = server()->port();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
  std::vector<uint8_t> out;
  if (size > 0 && (data[0] & 1)) out.assign(kHello, kHello + sizeof(kHello));
  if (size > 1) out.insert(out.end(), data + 1, data + size);
  for (size_t sent = 0; sent < out.size();) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may drop us mid-way: that is its right
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 20) > 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  ::close(fd);
  return 0;
}
