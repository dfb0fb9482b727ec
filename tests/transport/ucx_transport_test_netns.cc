// ucx_transport_test (tests/transport/ucx_transport_test.cc), UCX over TCP between two network
// namespaces joined by a veth pair (skipped without root and ip(8)).
#include <gtest/gtest.h>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_UCX

#include "tests/transport/ucx_transport_test.h"

namespace eagercomm::test::ucx_test {
namespace {

// ---- TCP between two network namespaces joined by a veth pair ----

struct Netns {
  std::string a, b;
  bool ok = false;
  std::string why;
  Netns() {
    if (geteuid() != 0) {
      why = "needs root for ip netns";
      return;
    }
    if (system("ip -V > /dev/null 2>&1") != 0) {
      why = "no ip(8)";
      return;
    }
    const int id = getpid() % 60000;
    a = "ecucx" + std::to_string(id) + "a";
    b = "ecucx" + std::to_string(id) + "b";
    const std::string va = "ecv" + std::to_string(id) + "a", vb = "ecv" + std::to_string(id) + "b";
    const std::string net = "10.213." + std::to_string(id % 250) + ".";
    const std::string cmd =
        "ip netns add " + a + " && ip netns add " + b + " && ip link add " + va +
        " type veth peer name " + vb + " && ip link set " + va + " netns " + a +
        " && ip link set " + vb + " netns " + b + " && ip -n " + a + " addr add " + net +
        "1/24 dev " + va + " && ip -n " + b + " addr add " + net + "2/24 dev " + vb + " && ip -n " +
        a + " link set " + va + " up && ip -n " + b + " link set " + vb + " up && ip -n " + a +
        " link set lo up && ip -n " + b + " link set lo up";
    if (system((cmd + " > /dev/null 2>&1").c_str()) != 0) {
      why = "could not create network namespaces: " + cmd;
      return;
    }
    ok = true;
  }
  ~Netns() {
    if (!a.empty()) (void)!system(("ip netns del " + a + " > /dev/null 2>&1").c_str());
    if (!b.empty()) (void)!system(("ip netns del " + b + " > /dev/null 2>&1").c_str());
  }
};

// What `ip netns exec` does: enter the namespace and see its own /sys/class/net (UCX lists
// network devices there).
void enter_netns(const std::string& name) {
  const std::string path = "/var/run/netns/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "setns %s: %s\n", name.c_str(), strerror(errno));
    _exit(3);
  }
  close(fd);
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) {
    fprintf(stderr, "mount namespace: %s\n", strerror(errno));
    _exit(3);
  }
  umount2("/sys", MNT_DETACH);
  if (mount(name.c_str(), "/sys", "sysfs", 0, nullptr) != 0) {
    fprintf(stderr, "mount sysfs: %s\n", strerror(errno));
    _exit(3);
  }
}

TEST(UcxTransport, TcpBetweenNetworkNamespaces) {
  Netns ns;
  if (!ns.ok) GTEST_SKIP() << ns.why;
  WorldOptions wo;
  wo.before_ucx = [&](int rank) { enter_netns(rank == 0 ? ns.a : ns.b); };
  run_world(
      2, Tls::kTcp,
      [](Ctx& c) {
        stream_exchange(c, 100);
        // The target asleep in wait() wakes for the peer's notification and serves its puts.
        if (c.rank == 0) {
          c.barrier("sleep");
          std::this_thread::sleep_for(200ms);
          c.notify(1, 77);
        } else {
          c.barrier("sleep");
          const auto t0 = Clock::now();
          ASSERT_TRUE(c.pump_until([&] { return !c.notes.empty(); }, 10s));
          EXPECT_EQ(c.notes.front().tag, 77u);
          EXPECT_LT(Clock::now() - t0, 5s);
        }
        c.barrier("end");
      },
      wo);
}

}  // namespace
}  // namespace eagercomm::test::ucx_test

#endif  // EAGERCOMM_HAVE_UCX
