#include "transport/verbs/verbs_cm_address.h"

#include <arpa/inet.h>

#include <vector>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_VERBS
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <cstring>

#include "transport/verbs/verbs_api.h"
#endif

namespace eagercomm::verbs {

std::string CmAddress::to_string() const {
  if (!found) return "none";
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == 4 ? AF_INET : AF_INET6, ip.data(), text, sizeof(text));
  return std::string(text) + " (" + interface + ")";
}

CmAddress choose_cm_address(std::span<const IpCandidate> candidates, const std::string& device,
                            uint8_t port) {
  CmAddress out;
  const auto take = [&out](const IpCandidate& c) {
    out.found = true;
    out.family = c.family;
    out.ip = c.ip;
    out.interface = c.interface;
    return out;
  };
  const auto ours = [&](const IpCandidate& c) { return c.device == device && c.port == port; };
  for (const IpCandidate& c : candidates) {
    if (ours(c) && c.family == 4) return take(c);
  }
  for (const IpCandidate& c : candidates) {
    const bool link_local = c.ip[0] == 0xfe && (c.ip[1] & 0xc0) == 0x80;
    if (ours(c) && c.family == 6 && !link_local) return take(c);
  }
  out.why_none = "no IPv4 or global IPv6 address of this host is bound to " + device + " port " +
                 std::to_string(port) + " (" + std::to_string(candidates.size()) +
                 " addresses checked)";
  return out;
}

#if EAGERCOMM_HAVE_VERBS

CmAddress find_cm_address(const std::string& device, uint8_t port) {
  Result<const VerbsApi*> loaded = system_verbs_api();
  if (!loaded.ok()) {
    CmAddress none;
    none.why_none = loaded.status().message();
    return none;
  }
  return find_cm_address(*loaded.value(), device, port);
}

CmAddress find_cm_address(const VerbsApi& api, const std::string& device, uint8_t port) {
  if (!api.has_cm) {
    CmAddress none;
    none.why_none = api.cm_missing;
    return none;
  }
  rdma_event_channel* channel = api.create_event_channel();
  if (channel == nullptr) {
    CmAddress none;
    none.why_none = std::string("rdma_create_event_channel: ") + std::strerror(errno);
    return none;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    api.destroy_event_channel(channel);
    CmAddress none;
    none.why_none = std::string("getifaddrs: ") + std::strerror(errno);
    return none;
  }
  std::vector<IpCandidate> candidates;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || ((i->ifa_flags & IFF_LOOPBACK) && !api.cm_on_loopback) ||
        !(i->ifa_flags & IFF_UP)) {
      continue;
    }
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    IpCandidate c;
    c.interface = i->ifa_name;
    c.family = family == AF_INET ? 4 : 6;
    sockaddr_storage sa{};
    if (family == AF_INET) {
      std::memcpy(&sa, i->ifa_addr, sizeof(sockaddr_in));
      std::memcpy(c.ip.data(), &reinterpret_cast<sockaddr_in*>(&sa)->sin_addr, 4);
    } else {
      std::memcpy(&sa, i->ifa_addr, sizeof(sockaddr_in6));
      std::memcpy(c.ip.data(), &reinterpret_cast<sockaddr_in6*>(&sa)->sin6_addr, 16);
    }
    // Binding ties an id to the RDMA device that owns the address (fails when none does).
    rdma_cm_id* id = nullptr;
    if (api.create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0) {
      if (api.bind_addr(id, reinterpret_cast<sockaddr*>(&sa)) == 0 && id->verbs != nullptr) {
        c.device = api.get_device_name(id->verbs->device);
        c.port = id->port_num;
      }
      api.destroy_id(id);
    }
    candidates.push_back(std::move(c));
  }
  freeifaddrs(list);
  api.destroy_event_channel(channel);
  return choose_cm_address(candidates, device, port);
}

#else

CmAddress find_cm_address(const std::string&, uint8_t) {
  CmAddress none;
  none.why_none = "this build has no librdmacm";
  return none;
}
CmAddress find_cm_address(const VerbsApi&, const std::string& device, uint8_t port) {
  return find_cm_address(device, port);
}

#endif

}  // namespace eagercomm::verbs
