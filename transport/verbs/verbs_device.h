// RDMA devices as the verbs transport sees them, and the choice of device, port and GID.
//
// The descriptions are plain data, filled from libibverbs by list_verbs_devices() (and by tests
// by hand), so the choice (EAGERCOMM_IB_HCA, EAGERCOMM_IB_PORT, EAGERCOMM_IB_GID_INDEX; RoCE and
// InfiniBand link layers) is unit-tested on machines without RDMA hardware (issue #6).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "transport/transport_config.h"

namespace eagercomm::verbs {

enum class LinkLayer : uint8_t { kInfiniBand, kEthernet, kUnknown };
const char* link_layer_name(LinkLayer link);

struct Gid {
  std::array<uint8_t, 16> raw{};
  bool roce_v2 = false;  // the GID's type (sysfs gid_attrs/types): RoCE v2 rather than v1 / IB

  bool empty() const;             // all zero: an unused table entry
  bool ipv4_mapped() const;       // ::ffff:a.b.c.d, the RoCE v2 GID of an IPv4 address
  bool link_local() const;        // fe80::/10, the default GID every port has
  std::string to_string() const;  // IPv6 text form, as show_gids prints it
};

struct PortInfo {
  uint8_t number = 0;  // from 1
  bool active = false;
  LinkLayer link = LinkLayer::kUnknown;
  uint16_t lid = 0;
  uint32_t active_mtu = 0;  // bytes
  std::vector<Gid> gids;    // the whole table, empty entries included (index = position)
};

struct DeviceInfo {
  std::string name;  // "mlx5_0"
  std::vector<PortInfo> ports;
  // Where the NIC sits (sysfs: /sys/class/infiniband/<name>/device): its PCI path from the host
  // bridge ("/sys/devices/pci0000:3a/0000:3a:02.0/0000:3c:00.0"; empty when unknown) and NUMA
  // node (-1 when unknown).
  std::string pci_path;
  int numa_node = -1;
};

// What a rank is near: the NUMA node it runs on and, when it drives a GPU, that GPU's PCI path
// (the same sysfs form). Unknown parts are -1 / empty.
struct Locality {
  int numa_node = -1;
  std::string gpu_pci_path;
};

// How far a NIC is from `here`, nearest first, as NCCL ranks paths: behind the same PCIe switch
// as the GPU, under the same host bridge, on the same NUMA node (or unknown), elsewhere.
enum class NicDistance : uint8_t { kSameSwitch, kSameHostBridge, kSameNode, kFar };
NicDistance nic_distance(const DeviceInfo& nic, const Locality& here);

// Which of `candidates` (indices into `devices`) a rank takes: the nearest ones, and among those
// the (local_rank mod count)-th, so the ranks of a host spread over equally near NICs instead
// of all taking the first. `candidates` must not be empty.
size_t choose_by_locality(std::span<const DeviceInfo> devices, std::span<const size_t> candidates,
                          const Locality& here, uint32_t local_rank);

// The NUMA node this thread runs on, from sysfs (-1 when unknown).
int current_numa_node();

// What list_verbs_devices() found, and why the list is empty when it is.
struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string reason;  // why there are none (no libibverbs in this build, no kernel support, ...)
};

// Every RDMA device on this host with its ports and GID tables. Never fails: problems end up in
// `reason` (no device) or leave a device out (logged at info level).
DeviceList list_verbs_devices();
struct VerbsApi;  // verbs_api.h (builds with libibverbs' headers only)
// The devices `api` lists (the system's rdma-core above, or the emulated device).
DeviceList list_verbs_devices(const VerbsApi& api);

// Where the transport will talk from.
struct Endpoint {
  std::string device;
  uint8_t port = 0;
  LinkLayer link = LinkLayer::kUnknown;
  uint16_t lid = 0;
  uint32_t mtu = 0;        // the port's active MTU in bytes
  bool use_gid = false;    // RoCE always; InfiniBand only when a GID index was asked for
  uint32_t gid_index = 0;  // valid when use_gid
  Gid gid;                 // valid when use_gid
};

// Chooses from `devices` by config.ib_hca / ib_port / ib_gid_index:
//  - device: the named one, else of those with an active port (and the asked port) the one
//    choose_by_locality() gives for `here` and config.local_rank;
//  - port: the asked one (it must exist and be active), else the device's first active port;
//  - GID on Ethernet (RoCE): the asked index (in range, not empty), else the first RoCE v2
//    IPv4-mapped GID, else the first RoCE v2 one that is not link-local, else the first
//    non-empty one; on InfiniBand: none unless asked (then checked the same way).
// Errors name the variable and what exists here: kUnavailable when there is no device or no
// active port, kInvalidArgument for a device, port or GID index that does not exist.
Result<Endpoint> choose_endpoint(std::span<const DeviceInfo> devices, const TransportConfig& config,
                                 const std::string& why_none = {}, const Locality& here = {});

// The RoCE v2 GID of an IP address on `port` (IPv4: its ::ffff:a.b.c.d form; IPv6: itself): the
// entry rdma_cm uses for that address, which also fixes the interface and VLAN it goes out of
// (issue 18, defect 8: the first IPv4 entry of the port may be another VLAN's). -1 when the
// table has no such entry.
int roce_gid_of_ip(const PortInfo& port, uint8_t family, const std::array<uint8_t, 16>& ip);
// The port `endpoint` names in `devices`; nullptr when absent.
const PortInfo* find_port(std::span<const DeviceInfo> devices, const Endpoint& endpoint);

}  // namespace eagercomm::verbs
