// The verbs transport's choice of device, port and GID (EAGERCOMM_IB_HCA / _IB_PORT /
// _IB_GID_INDEX) over described devices, and the device listing on this host.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "collectives/config.h"
#include "runtime/build_config.h"
#include "transport/registry.h"
#include "transport/verbs/verbs_device.h"

#if EAGERCOMM_HAVE_VERBS
#include "transport/verbs/verbs_api.h"
#endif

namespace eagercomm::verbs {
namespace {

Gid gid(std::initializer_list<uint8_t> bytes, bool v2) {
  Gid g;
  size_t i = 0;
  for (uint8_t b : bytes) g.raw[i++] = b;
  g.roce_v2 = v2;
  return g;
}
Gid link_local(bool v2) { return gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, v2); }
Gid ipv4(uint8_t last, bool v2) {
  return gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, last}, v2);
}

// A RoCE device like a ConnectX on Ethernet: link-local v1/v2, then the IPv4 address v1/v2.
DeviceInfo roce(const std::string& name, bool active = true) {
  PortInfo p;
  p.number = 1;
  p.active = active;
  p.link = LinkLayer::kEthernet;
  p.active_mtu = 1024;
  p.gids = {link_local(false), link_local(true), ipv4(7, false), ipv4(7, true), Gid{}, Gid{}};
  DeviceInfo d;
  d.name = name;
  d.ports = {p};
  return d;
}

// An InfiniBand HCA with two ports, the second one down.
DeviceInfo ib(const std::string& name) {
  PortInfo p1;
  p1.number = 1;
  p1.active = true;
  p1.link = LinkLayer::kInfiniBand;
  p1.lid = 17;
  p1.active_mtu = 4096;
  p1.gids = {link_local(false), Gid{}};
  PortInfo p2 = p1;
  p2.number = 2;
  p2.active = false;
  p2.lid = 0;
  DeviceInfo d;
  d.name = name;
  d.ports = {p1, p2};
  return d;
}

Config with(std::initializer_list<std::pair<const char*, const char*>> vars) {
  Config c;
  for (const auto& [name, value] : vars) EXPECT_TRUE(c.set(name, value).ok()) << name;
  return c;
}

// A two-socket host as nvidia-smi topo would draw it: host bridge pci0000:00 (NUMA 0) with a
// PCIe switch holding GPU 0 and mlx5_0, and mlx5_1 on another root port; host bridge
// pci0000:80 (NUMA 1) with mlx5_2 and mlx5_3.
DeviceInfo placed(const std::string& name, const std::string& pci, int numa) {
  DeviceInfo d = ib(name);
  d.pci_path = pci;
  d.numa_node = numa;
  return d;
}
std::vector<DeviceInfo> two_socket_host() {
  return {placed("mlx5_0",
                 "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0", 0),
          placed("mlx5_1", "/sys/devices/pci0000:00/0000:00:03.0/0000:06:00.0", 0),
          placed("mlx5_2", "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 1),
          placed("mlx5_3", "/sys/devices/pci0000:80/0000:80:02.0/0000:82:00.0", 1)};
}
const char* kGpu0 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0";

TEST(VerbsLocality, DistanceFollowsThePciTreeThenTheNumaNode) {
  const auto host = two_socket_host();
  const Locality gpu0{0, kGpu0};
  EXPECT_EQ(nic_distance(host[0], gpu0), NicDistance::kSameSwitch);
  EXPECT_EQ(nic_distance(host[1], gpu0), NicDistance::kSameHostBridge);
  EXPECT_EQ(nic_distance(host[2], gpu0), NicDistance::kFar);
  const Locality node1{1, ""};
  EXPECT_EQ(nic_distance(host[0], node1), NicDistance::kFar);
  EXPECT_EQ(nic_distance(host[2], node1), NicDistance::kSameNode);
  EXPECT_EQ(nic_distance(host[2], Locality{}), NicDistance::kSameNode) << "unknown: no penalty";
  DeviceInfo unplaced = ib("mlx5_9");
  EXPECT_EQ(nic_distance(unplaced, gpu0), NicDistance::kSameNode);
}

TEST(VerbsLocality, RanksTakeTheNearestNicAndSpreadOverEquallyNearOnes) {
  const auto host = two_socket_host();
  const std::vector<size_t> all = {0, 1, 2, 3};
  // The GPU's switch wins for every local rank.
  for (uint32_t lr = 0; lr < 4; ++lr) {
    EXPECT_EQ(choose_by_locality(host, all, Locality{0, kGpu0}, lr), 0u);
  }
  // A host rank on NUMA node 1 alternates over that node's two NICs.
  EXPECT_EQ(choose_by_locality(host, all, Locality{1, ""}, 0), 2u);
  EXPECT_EQ(choose_by_locality(host, all, Locality{1, ""}, 1), 3u);
  EXPECT_EQ(choose_by_locality(host, all, Locality{1, ""}, 2), 2u);
  // Nothing known: the local ranks spread over every NIC (all ranks took mlx5_0 before).
  EXPECT_EQ(choose_by_locality(host, all, Locality{}, 3), 3u);
  // Only the candidates count (devices without an active port are not among them).
  const std::vector<size_t> far_only = {2, 3};
  EXPECT_EQ(choose_by_locality(host, far_only, Locality{0, kGpu0}, 1), 3u);
}

TEST(VerbsLocality, ChooseEndpointUsesItUnlessADeviceIsNamed) {
  const auto host = two_socket_host();
  Config config;
  config.local_rank = 1;
  auto r = choose_endpoint(host, config, {}, Locality{1, ""});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().device, "mlx5_3");
  config = with({{"EAGERCOMM_IB_HCA", "mlx5_0"}});
  config.local_rank = 1;
  r = choose_endpoint(host, config, {}, Locality{1, ""});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().device, "mlx5_0") << "EAGERCOMM_IB_HCA overrides locality";
}

TEST(VerbsLocality, TheCurrentNumaNodeIsReadOrUnknown) {
  const int node = current_numa_node();
  std::error_code ec;
  if (std::filesystem::exists("/sys/devices/system/node/node0", ec)) {
    EXPECT_GE(node, 0) << "sysfs has NUMA nodes: the thread's must be found";
  } else {
    EXPECT_EQ(node, -1);
  }
}

TEST(VerbsChoice, NoDeviceSaysWhy) {
  auto r = choose_endpoint({}, Config{}, "the kernel has no InfiniBand support");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no RDMA device"), std::string::npos);
  EXPECT_NE(r.status().message().find("no InfiniBand support"), std::string::npos);
}

TEST(VerbsChoice, FirstDeviceWithAnActivePortAndItsIpv4RoceV2Gid) {
  const std::vector<DeviceInfo> devices = {roce("mlx5_0", false), roce("mlx5_1")};
  auto r = choose_endpoint(devices, Config{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().device, "mlx5_1");
  EXPECT_EQ(r.value().port, 1);
  EXPECT_TRUE(r.value().use_gid);
  EXPECT_EQ(r.value().gid_index, 3u);  // RoCE v2 + IPv4-mapped beats the link-local ones
  EXPECT_EQ(r.value().gid.to_string(), "::ffff:198.18.0.7");
}

TEST(VerbsChoice, RoceWithoutIpv4FallsBackToV2ThenAnyGid) {
  DeviceInfo d = roce("rxe0");
  d.ports[0].gids = {link_local(false), link_local(true)};
  auto r = choose_endpoint(std::vector<DeviceInfo>{d}, Config{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().gid_index, 0u);  // the v2 one is link-local: first non-empty wins
  d.ports[0].gids = {link_local(false),
                     gid({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, true)};
  r = choose_endpoint(std::vector<DeviceInfo>{d}, Config{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().gid_index, 1u);
  d.ports[0].gids = {Gid{}, Gid{}};
  r = choose_endpoint(std::vector<DeviceInfo>{d}, Config{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GID table is empty"), std::string::npos);
}

// Defect 8 of issue 18: a port with addresses on two VLANs (198.18.0.7 on the base interface,
// 198.18.5.9 on a VLAN) has a v2 GID for each; the one for the IP rdma_cm uses is chosen, not
// the first IPv4 entry, and IPv6 addresses are matched as they are.
TEST(VerbsChoice, TheRoceGidOfTheCmAddressIsFoundByItsIp) {
  PortInfo p = roce("mlx5_0").ports[0];
  p.gids.push_back(gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 5, 9}, false));
  p.gids.push_back(gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 5, 9}, true));
  const std::array<uint8_t, 16> vlan_ip = {198, 18, 5, 9};
  const std::array<uint8_t, 16> base_ip = {198, 18, 0, 7};
  EXPECT_EQ(roce_gid_of_ip(p, 4, vlan_ip), 7) << "the v2 entry, not the v1 one at 6";
  EXPECT_EQ(roce_gid_of_ip(p, 4, base_ip), 3);
  const std::array<uint8_t, 16> other = {10, 0, 0, 1};
  EXPECT_EQ(roce_gid_of_ip(p, 4, other), -1);
  const Gid v6 = gid({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, true);
  p.gids.push_back(v6);
  EXPECT_EQ(roce_gid_of_ip(p, 6, v6.raw), 8);
  const std::vector<DeviceInfo> devices = {roce("mlx5_0"), roce("mlx5_1")};
  Endpoint e;
  e.device = "mlx5_1";
  e.port = 1;
  EXPECT_EQ(find_port(devices, e), &devices[1].ports[0]);
  e.port = 2;
  EXPECT_EQ(find_port(devices, e), nullptr);
}

TEST(VerbsChoice, InfinibandUsesTheLidAndNoGidUnlessAsked) {
  const std::vector<DeviceInfo> devices = {ib("mlx5_0")};
  auto r = choose_endpoint(devices, Config{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().link, LinkLayer::kInfiniBand);
  EXPECT_EQ(r.value().lid, 17);
  EXPECT_FALSE(r.value().use_gid);
  r = choose_endpoint(devices, with({{"EAGERCOMM_IB_GID_INDEX", "0"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().use_gid);
  EXPECT_EQ(r.value().gid_index, 0u);
}

TEST(VerbsChoice, NamedDeviceThatDoesNotExistListsTheDevices) {
  const std::vector<DeviceInfo> devices = {ib("mlx5_0"), roce("mlx5_1")};
  auto r = choose_endpoint(devices, with({{"EAGERCOMM_IB_HCA", "mlx5_9"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("EAGERCOMM_IB_HCA=mlx5_9"), std::string::npos);
  EXPECT_NE(r.status().message().find("mlx5_0, mlx5_1"), std::string::npos);
  r = choose_endpoint(devices, with({{"EAGERCOMM_IB_HCA", "mlx5_1"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().device, "mlx5_1");
}

TEST(VerbsChoice, PortThatDoesNotExistOrIsDown) {
  const std::vector<DeviceInfo> devices = {ib("mlx5_0")};
  auto r =
      choose_endpoint(devices, with({{"EAGERCOMM_IB_HCA", "mlx5_0"}, {"EAGERCOMM_IB_PORT", "3"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("EAGERCOMM_IB_PORT=3"), std::string::npos);
  EXPECT_NE(r.status().message().find("ports: 1, 2"), std::string::npos);
  r = choose_endpoint(devices, with({{"EAGERCOMM_IB_HCA", "mlx5_0"}, {"EAGERCOMM_IB_PORT", "2"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no active port 2"), std::string::npos);
  r = choose_endpoint(devices, with({{"EAGERCOMM_IB_PORT", "2"}}));  // no device named
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no device here has an active port 2"), std::string::npos);
}

TEST(VerbsChoice, GidIndexOutOfRangeOrEmpty) {
  const std::vector<DeviceInfo> devices = {roce("mlx5_0")};
  auto r = choose_endpoint(devices, with({{"EAGERCOMM_IB_GID_INDEX", "6"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("EAGERCOMM_IB_GID_INDEX=6 out of range"), std::string::npos);
  EXPECT_NE(r.status().message().find("has 6 GIDs"), std::string::npos);
  r = choose_endpoint(devices, with({{"EAGERCOMM_IB_GID_INDEX", "5"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is empty"), std::string::npos);
  r = choose_endpoint(devices, with({{"EAGERCOMM_IB_GID_INDEX", "2"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().gid_index, 2u);  // asked for: taken even though it is RoCE v1
}

TEST(VerbsConfig, GidIndexTakesAutoOrAnIndexUpTo255) {
  Config c;
  EXPECT_EQ(c.ib_gid_index, Config::kAutoIndex);
  ASSERT_TRUE(c.set("EAGERCOMM_IB_GID_INDEX", "3").ok());
  EXPECT_EQ(c.ib_gid_index, 3u);
  ASSERT_TRUE(c.set("EAGERCOMM_IB_GID_INDEX", "auto").ok());
  EXPECT_EQ(c.ib_gid_index, Config::kAutoIndex);
  Status s = c.set("EAGERCOMM_IB_GID_INDEX", "256");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("EAGERCOMM_IB_GID_INDEX='256'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is not auto or an integer (0..255)"), std::string::npos)
      << s.message();
  EXPECT_FALSE(c.set("EAGERCOMM_IB_GID_INDEX", "-1").ok());
  EXPECT_FALSE(c.set("EAGERCOMM_IB_PORT", "256").ok());
  bool shown = false;
  for (const Config::Row& row : Config{}.describe()) {
    if (row.name == "EAGERCOMM_IB_GID_INDEX") {
      EXPECT_EQ(row.value, "auto");
      shown = true;
    }
  }
  EXPECT_TRUE(shown);
}

// This host: either devices (then each has a name and numbered ports) or a reason for none.
TEST(VerbsDevices, ListingNamesDevicesOrSaysWhyNone) {
  const DeviceList list = list_verbs_devices();
  if (list.devices.empty()) {
    EXPECT_FALSE(list.reason.empty());
    std::printf("no RDMA device here: %s\n", list.reason.c_str());
    auto r = choose_endpoint(list.devices, Config{}, list.reason);
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    return;
  }
  for (const DeviceInfo& d : list.devices) {
    EXPECT_FALSE(d.name.empty());
    for (const PortInfo& p : d.ports) EXPECT_GE(p.number, 1);
  }
}

// Creating the transport: on a host without an RDMA port it fails with the listing's reason; a
// device that does not exist is named in the error wherever devices exist.
TEST(VerbsTransport, CreateSaysWhyItCannotRunHere) {
  Config config;
  TransportParams params{0, 2, &config, nullptr, "verbs-test", false};
  auto t = create_transport("verbs", params);
  if (!EAGERCOMM_HAVE_VERBS) {
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("not available in this build"), std::string::npos)
        << t.status().message();
    return;
  }
  const DeviceList list = list_verbs_devices();
  if (list.devices.empty()) {
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(t.status().message().find("no RDMA device"), std::string::npos)
        << t.status().message();
    std::printf("verbs transport not testable here: %s\n", t.status().message().c_str());
    return;
  }
  ASSERT_TRUE(config.set("EAGERCOMM_IB_HCA", "no_such_hca0").ok());
  t = create_transport("verbs", params);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("EAGERCOMM_IB_HCA=no_such_hca0"), std::string::npos);
}

#if EAGERCOMM_HAVE_VERBS
// rdma-core is loaded at run time (verbs_api.h): what it names when a part is missing.
TEST(VerbsApi, AMissingLibraryIsNamed) {
  auto api = load_verbs_api("libeagercomm-no-such-verbs.so.9", "librdmacm.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(api.status().message().find("cannot load libeagercomm-no-such-verbs.so.9"),
            std::string::npos)
      << api.status().message();
}

TEST(VerbsApi, ALibraryWithoutTheFunctionsIsRefusedNamingOne) {
  auto api = load_verbs_api("libc.so.6", nullptr);
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("libc.so.6 has no ibv_get_device_list"), std::string::npos)
      << api.status().message();
}

TEST(VerbsApi, WithoutRdmacmOnlyTheCmPathIsOff) {
  auto api = load_verbs_api("libibverbs.so.1", "librdmacm-no-such.so.1");
  if (!api.ok()) GTEST_SKIP() << "no libibverbs.so.1 here: " << api.status().message();
  EXPECT_FALSE(api.value().has_cm);
  EXPECT_NE(api.value().cm_missing.find("cannot load librdmacm-no-such.so.1"), std::string::npos)
      << api.value().cm_missing;
  EXPECT_NE(api.value().open_device, nullptr);
  EXPECT_EQ(api.value().create_id, nullptr);
}

TEST(VerbsApi, TheSystemLibrariesResolveEveryFunction) {
  auto api = system_verbs_api();
  if (!api.ok()) GTEST_SKIP() << api.status().message();
  const VerbsApi& a = *api.value();
  EXPECT_EQ(a.source, "libibverbs.so.1");
  for (const void* fn : {reinterpret_cast<const void*>(a.get_device_list),
                         reinterpret_cast<const void*>(a.query_port_compat),
                         reinterpret_cast<const void*>(a.query_gid_ex_sized),
                         reinterpret_cast<const void*>(a.modify_qp),
                         reinterpret_cast<const void*>(a.get_async_event),
                         reinterpret_cast<const void*>(a.fork_init)}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_TRUE(a.has_cm) << a.cm_missing;
  // Loaded once: the same table every time.
  EXPECT_EQ(system_verbs_api().value(), &a);
}
#endif

}  // namespace
}  // namespace eagercomm::verbs
