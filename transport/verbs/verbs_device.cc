#include "transport/verbs/verbs_device.h"

#include <arpa/inet.h>

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace eagercomm::verbs {
namespace {

std::string names_of(std::span<const DeviceInfo> devices) {
  std::string out;
  for (const DeviceInfo& d : devices) out += (out.empty() ? "" : ", ") + d.name;
  return out;
}

std::string port_numbers(const DeviceInfo& d) {
  std::string out;
  for (const PortInfo& p : d.ports) out += (out.empty() ? "" : ", ") + std::to_string(p.number);
  return out.empty() ? "none" : out;
}

const PortInfo* first_active(const DeviceInfo& d) {
  for (const PortInfo& p : d.ports) {
    if (p.active) return &p;
  }
  return nullptr;
}

const PortInfo* port_of(const DeviceInfo& d, uint32_t number) {
  for (const PortInfo& p : d.ports) {
    if (p.number == number) return &p;
  }
  return nullptr;
}

// The automatic GID of a RoCE port, by preference; -1 when the table holds none.
int auto_gid(const PortInfo& p) {
  const auto find = [&p](auto pred) {
    for (size_t i = 0; i < p.gids.size(); ++i) {
      if (!p.gids[i].empty() && pred(p.gids[i])) return static_cast<int>(i);
    }
    return -1;
  };
  int i = find([](const Gid& g) { return g.roce_v2 && g.ipv4_mapped(); });
  if (i < 0) i = find([](const Gid& g) { return g.roce_v2 && !g.link_local(); });
  if (i < 0) i = find([](const Gid&) { return true; });
  return i;
}

// The components of a sysfs PCI path after /sys/devices ("pci0000:3a", "0000:3a:02.0", ...).
std::vector<std::string_view> pci_components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    if (end > start) out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  const auto root =
      std::find_if(out.begin(), out.end(), [](std::string_view c) { return c.starts_with("pci"); });
  out.erase(out.begin(), root);
  return out;
}

}  // namespace

NicDistance nic_distance(const DeviceInfo& nic, const Locality& here) {
  const auto a = pci_components(nic.pci_path);
  const auto b = pci_components(here.gpu_pci_path);
  if (!a.empty() && !b.empty()) {
    size_t common = 0;
    while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
    // host bridge, root port, switch upstream port: a switch above both devices
    if (common >= 3) return NicDistance::kSameSwitch;
    if (common >= 1) return NicDistance::kSameHostBridge;
  }
  if (nic.numa_node < 0 || here.numa_node < 0 || nic.numa_node == here.numa_node) {
    return NicDistance::kSameNode;
  }
  return NicDistance::kFar;
}

size_t choose_by_locality(std::span<const DeviceInfo> devices, std::span<const size_t> candidates,
                          const Locality& here, uint32_t local_rank) {
  NicDistance best = NicDistance::kFar;
  for (const size_t i : candidates) best = std::min(best, nic_distance(devices[i], here));
  std::vector<size_t> nearest;
  for (const size_t i : candidates) {
    if (nic_distance(devices[i], here) == best) nearest.push_back(i);
  }
  return nearest[local_rank % nearest.size()];
}

int current_numa_node() {
  const int cpu = sched_getcpu();
  if (cpu < 0) return -1;
  std::error_code ec;
  const std::filesystem::path dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("node") && name.size() > 4 &&
        std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::stoi(name.substr(4));
    }
  }
  return -1;
}

const char* link_layer_name(LinkLayer link) {
  switch (link) {
    case LinkLayer::kInfiniBand:
      return "InfiniBand";
    case LinkLayer::kEthernet:
      return "Ethernet (RoCE)";
    case LinkLayer::kUnknown:
      break;
  }
  return "unknown";
}

bool Gid::empty() const {
  return std::all_of(raw.begin(), raw.end(), [](uint8_t b) { return b == 0; });
}

bool Gid::ipv4_mapped() const {
  return std::all_of(raw.begin(), raw.begin() + 10, [](uint8_t b) { return b == 0; }) &&
         raw[10] == 0xff && raw[11] == 0xff;
}

bool Gid::link_local() const { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

std::string Gid::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, raw.data(), text, sizeof(text)) == nullptr) return "?";
  return text;
}

int roce_gid_of_ip(const PortInfo& port, uint8_t family, const std::array<uint8_t, 16>& ip) {
  Gid want;
  if (family == 4) {
    want.raw[10] = 0xff;
    want.raw[11] = 0xff;
    std::copy(ip.begin(), ip.begin() + 4, want.raw.begin() + 12);
  } else {
    want.raw = ip;
  }
  for (size_t i = 0; i < port.gids.size(); ++i) {
    if (port.gids[i].roce_v2 && port.gids[i].raw == want.raw) return static_cast<int>(i);
  }
  return -1;
}

const PortInfo* find_port(std::span<const DeviceInfo> devices, const Endpoint& endpoint) {
  for (const DeviceInfo& d : devices) {
    if (d.name == endpoint.device) return port_of(d, endpoint.port);
  }
  return nullptr;
}

Result<Endpoint> choose_endpoint(std::span<const DeviceInfo> devices, const TransportConfig& config,
                                 const std::string& why_none, const Locality& here) {
  if (devices.empty()) {
    return make_status(StatusCode::kUnavailable, "verbs: no RDMA device here%s%s",
                       why_none.empty() ? "" : ": ", why_none.c_str());
  }
  const bool port_asked = config.ib_port != 0;
  const DeviceInfo* device = nullptr;
  if (!config.ib_hca.empty()) {
    for (const DeviceInfo& d : devices) {
      if (d.name == config.ib_hca) device = &d;
    }
    if (device == nullptr) {
      return make_status(StatusCode::kInvalidArgument,
                         "verbs: EAGERCOMM_IB_HCA=%s: no such RDMA device; devices here: %s",
                         config.ib_hca.c_str(), names_of(devices).c_str());
    }
  } else {
    std::vector<size_t> usable;
    for (size_t i = 0; i < devices.size(); ++i) {
      const PortInfo* p =
          port_asked ? port_of(devices[i], config.ib_port) : first_active(devices[i]);
      if (p != nullptr && p->active) usable.push_back(i);
    }
    if (!usable.empty()) {
      device = &devices[choose_by_locality(devices, usable, here, config.local_rank)];
    }
    if (device == nullptr) {
      if (port_asked) {
        return make_status(StatusCode::kUnavailable,
                           "verbs: EAGERCOMM_IB_PORT=%u: no device here has an active port %u "
                           "(devices: %s)",
                           config.ib_port, config.ib_port, names_of(devices).c_str());
      }
      return make_status(StatusCode::kUnavailable,
                         "verbs: no RDMA device here has an active port (devices: %s)",
                         names_of(devices).c_str());
    }
  }
  const PortInfo* port = port_asked ? port_of(*device, config.ib_port) : first_active(*device);
  if (port_asked && port == nullptr) {
    return make_status(StatusCode::kInvalidArgument,
                       "verbs: EAGERCOMM_IB_PORT=%u: %s has no such port (ports: %s)",
                       config.ib_port, device->name.c_str(), port_numbers(*device).c_str());
  }
  if (port == nullptr || !port->active) {
    return make_status(StatusCode::kUnavailable, "verbs: %s has no active port%s%s",
                       device->name.c_str(), port_asked ? " " : "",
                       port_asked ? std::to_string(config.ib_port).c_str() : "");
  }
  Endpoint e;
  e.device = device->name;
  e.port = port->number;
  e.link = port->link;
  e.lid = port->lid;
  e.mtu = port->active_mtu;
  const bool gid_asked = config.ib_gid_index != TransportConfig::kAutoIndex;
  if (gid_asked) {
    if (config.ib_gid_index >= port->gids.size()) {
      return make_status(StatusCode::kInvalidArgument,
                         "verbs: EAGERCOMM_IB_GID_INDEX=%u out of range: port %u of %s has %zu "
                         "GIDs",
                         config.ib_gid_index, port->number, device->name.c_str(),
                         port->gids.size());
    }
    if (port->gids[config.ib_gid_index].empty()) {
      return make_status(StatusCode::kInvalidArgument,
                         "verbs: EAGERCOMM_IB_GID_INDEX=%u: that entry of port %u of %s is empty "
                         "(no address configured on it)",
                         config.ib_gid_index, port->number, device->name.c_str());
    }
    e.use_gid = true;
    e.gid_index = config.ib_gid_index;
  } else if (port->link == LinkLayer::kEthernet) {
    const int i = auto_gid(*port);
    if (i < 0) {
      return make_status(StatusCode::kUnavailable,
                         "verbs: port %u of %s is RoCE but its GID table is empty (no IP address "
                         "on the interface?)",
                         port->number, device->name.c_str());
    }
    e.use_gid = true;
    e.gid_index = static_cast<uint32_t>(i);
  } else if (port->link != LinkLayer::kInfiniBand) {
    return make_status(StatusCode::kUnavailable, "verbs: port %u of %s has an unknown link layer",
                       port->number, device->name.c_str());
  }
  if (e.use_gid) e.gid = port->gids[e.gid_index];
  return e;
}

}  // namespace eagercomm::verbs
