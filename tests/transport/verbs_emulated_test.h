// The shared part of verbs_emulated_test (one program of several files: see
// tests/transport/verbs_emulated_test.cc): worlds of verbs transports on the emulated
// device, driving them, posting until connected, a world that has carried one write, and
// where a queue pair lies on the emulated fabric. Only for a build with libibverbs headers
// (EAGERCOMM_HAVE_VERBS).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "runtime/build_config.h"
#include "transport/registry.h"
#include "transport/verbs/emulated/emu_cm.h"
#include "transport/verbs/emulated/emu_device_memory.h"
#include "transport/verbs/emulated/emu_verbs.h"
#include "transport/verbs/verbs_qp_settings.h"
#include "transport/verbs/verbs_wire.h"

namespace eagercomm::test::verbs_emulated_test {

using namespace std::chrono_literals;

inline Config emulated() {
  Config c;
  c.verbs_emulate = true;
  return c;
}

inline std::vector<std::unique_ptr<Transport>> connected_world(int size, const Config& config) {
  std::vector<std::unique_ptr<Transport>> t;
  for (int r = 0; r < size; ++r) {
    TransportParams params{r, size, &config, nullptr, "emu-test", false};
    auto made = create_transport("verbs", params);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    if (!made.ok()) return {};
    t.push_back(std::move(made.value()));
  }
  for (int r = 0; r < size; ++r) {
    for (int p = 0; p < size; ++p) {
      if (p == r) continue;
      EXPECT_TRUE(t[r]->connect(p, t[p]->local_address()).ok());
    }
  }
  return t;
}

// Polls every transport until `done` or 10 s pass; completions go to `seen` per rank.
template <typename Done>
bool drive(std::vector<std::unique_ptr<Transport>>& t,
           std::vector<std::vector<TransportCompletion>>& seen, Done&& done) {
  seen.resize(t.size());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (size_t r = 0; r < t.size(); ++r) {
      TransportCompletion buf[16];
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
    if (done()) return true;
    std::this_thread::sleep_for(100us);
  }
  return false;
}

inline size_t count(const std::vector<TransportCompletion>& v, TransportCompletion::Kind kind) {
  size_t n = 0;
  for (const auto& c : v) n += c.kind == kind;
  return n;
}

// The emulated port of a transport (its address says).
inline uint32_t lid_of(Transport& t) {
  auto a = verbs::decode_address(t.local_address(), t.rank(), t.size());
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  return a.ok() ? a.value().lid : 0;
}

// Where rank `from`'s queue pair to `to` is on the emulated fabric: the store path's address
// names it; a pair connected over rdma_cm (on demand) is found by where its path leads.
inline verbs::emu::QpRef qp_of(std::vector<std::unique_ptr<Transport>>& t, int from, int to) {
  const uint32_t lid = lid_of(*t[from]);
  auto qpn = verbs::emu::qp_towards(lid, lid_of(*t[to]));
  EXPECT_TRUE(qpn.ok()) << qpn.status().to_string();
  return {lid, qpn.ok() ? qpn.value() : 0};
}

// A host region at `to`, imported by `from`, and a source region at `from`.
struct Route {
  std::unique_ptr<MemoryRegion> src;
  std::unique_ptr<MemoryRegion> dst;
  std::unique_ptr<RemoteRegion> remote;
};
inline Route route(std::vector<std::unique_ptr<Transport>>& t, int from, int to, size_t bytes) {
  Route r;
  auto dst = t[to]->allocate(bytes, MemoryKind::kHost);
  auto src = t[from]->allocate(bytes, MemoryKind::kHost);
  EXPECT_TRUE(dst.ok() && src.ok());
  if (!dst.ok() || !src.ok()) return r;
  auto remote = t[from]->import_region(to, dst.value()->remote_key());
  EXPECT_TRUE(remote.ok()) << remote.status().to_string();
  if (!remote.ok()) return r;
  r.src = std::move(src.value());
  r.dst = std::move(dst.value());
  r.remote = std::move(remote.value());
  return r;
}

// Posts until the store path has connected (kBusy before), polling meanwhile.
inline Status post(std::vector<std::unique_ptr<Transport>>& t,
                   std::vector<std::vector<TransportCompletion>>& seen,
                   const std::function<Status()>& write) {
  seen.resize(t.size());
  Status s(StatusCode::kBusy, "");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (s.code() == StatusCode::kBusy && std::chrono::steady_clock::now() < deadline) {
    s = write();
    if (s.code() != StatusCode::kBusy) break;
    for (size_t r = 0; r < t.size(); ++r) {
      TransportCompletion buf[16];
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
  }
  return s;
}

// A world whose pair (from, to) has carried one 8-byte write (tag 1, cookie 1): connected, on
// whichever path the config picks.
struct World {
  std::vector<std::unique_ptr<Transport>> t;
  std::vector<std::vector<TransportCompletion>> seen;
  Route r;
  bool ok = false;
};
inline World world_with_a_write(int size, const Config& config, int from, int to) {
  World w;
  w.t = connected_world(size, config);
  w.seen.resize(size);
  if (static_cast<int>(w.t.size()) != size) return w;
  w.r = route(w.t, from, to, 64);
  if (w.r.remote == nullptr) return w;
  const Status s =
      post(w.t, w.seen, [&] { return w.t[from]->write(*w.r.src, 0, *w.r.remote, 0, 8, 1, 1); });
  EXPECT_TRUE(s.ok()) << s.to_string();
  w.ok = s.ok();
  return w;
}

inline bool lost(const std::vector<TransportCompletion>& v, int peer) {
  for (const auto& c : v) {
    if (c.kind == TransportCompletion::Kind::kPeerError && c.peer == peer) return true;
  }
  return false;
}

}  // namespace eagercomm::test::verbs_emulated_test
