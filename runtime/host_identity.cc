#include "runtime/host_identity.h"

#include <unistd.h>

#include <fstream>

#include "runtime/hash.h"

namespace eagercomm {

std::string host_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ipc[128] = {};
  const ssize_t n = readlink("/proc/self/ns/ipc", ipc, sizeof(ipc) - 1);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return boot + "/" + (n > 0 ? std::string(ipc, n) : std::string("?")) + "/" + host;
}

uint64_t host_identity_hash() { return fnv1a(host_identity()); }

}  // namespace eagercomm
