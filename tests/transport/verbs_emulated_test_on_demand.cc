// Part of verbs_emulated_test (see verbs_emulated_test.cc): queue pairs made on demand over
// rdma_cm (issue 21). A rank's address carries no queue pairs, connect() makes none, the first
// write or notify from either side connects the pair (both sides at once included: crossing
// requests), and ranks that never talk hold nothing for each other. The store path still makes
// every pair at creation, and a job mixing the two is refused naming what to set.
#include <gtest/gtest.h>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_VERBS
#include "tests/transport/verbs_emulated_test.h"
#endif

namespace eagercomm::test::verbs_emulated_test {
namespace {

#if EAGERCOMM_HAVE_VERBS

uint32_t queue_pairs(Transport& t) {
  auto n = verbs::emu::qp_count(lid_of(t));
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  return n.ok() ? n.value() : UINT32_MAX;
}

TEST(VerbsOnDemand, OnlyRanksThatTalkHoldQueuePairs) {
  const Config config = emulated();  // auto: rdma_cm, the emulated device having an address
  auto t = connected_world(4, config);
  ASSERT_EQ(t.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(t[r]->capabilities().connects_on_demand);
    auto a = verbs::decode_address(t[r]->local_address(), r, 4);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_TRUE(a.value().offers_cm);
    EXPECT_TRUE(a.value().qps.empty()) << "rank " << r << " published queue pairs";
    EXPECT_EQ(t[r]->connected_peers(), 0u) << "rank " << r;
    EXPECT_EQ(queue_pairs(*t[r]), 0u) << "rank " << r;
  }
  // Rank 0 writes to rank 2 and notifies rank 3; rank 1 talks to nobody.
  std::vector<std::vector<TransportCompletion>> seen(4);
  Route r02 = route(t, 0, 2, 64);
  ASSERT_NE(r02.remote, nullptr);
  std::memcpy(r02.src->data(), "on first", 8);
  ASSERT_TRUE(
      post(t, seen, [&] { return t[0]->write(*r02.src, 0, *r02.remote, 0, 8, 5, 6); }).ok());
  ASSERT_TRUE(post(t, seen, [&] { return t[0]->notify(3, 7); }).ok());
  ASSERT_TRUE(drive(t, seen, [&] {
    return count(seen[2], TransportCompletion::Kind::kNotify) == 1 &&
           count(seen[3], TransportCompletion::Kind::kNotify) == 1;
  }));
  EXPECT_EQ(std::memcmp(r02.dst->data(), "on first", 8), 0);
  EXPECT_EQ(t[0]->connected_peers(), 2u);
  EXPECT_EQ(t[1]->connected_peers(), 0u);
  EXPECT_EQ(t[2]->connected_peers(), 1u) << "the accepting side makes its queue pair too";
  EXPECT_EQ(t[3]->connected_peers(), 1u);
  EXPECT_EQ(queue_pairs(*t[0]), 2u);
  EXPECT_EQ(queue_pairs(*t[1]), 0u);
  // The accepting side can send back over the pair the other side made.
  Route r20 = route(t, 2, 0, 64);
  ASSERT_NE(r20.remote, nullptr);
  ASSERT_TRUE(
      post(t, seen, [&] { return t[2]->write(*r20.src, 0, *r20.remote, 0, 8, 9, 9); }).ok());
  ASSERT_TRUE(drive(t, seen, [&] { return count(seen[0], TransportCompletion::Kind::kNotify); }));
  EXPECT_EQ(t[2]->connected_peers(), 1u) << "no second pair for the way back";
  for (int r = 0; r < 4; ++r) EXPECT_EQ(count(seen[r], TransportCompletion::Kind::kPeerError), 0u);
}

// Both sides of every pair send first, before either polls: their rdma_cm requests cross. The
// higher rank's attempt wins, the lower one accepts it; every notification arrives once, in
// order, and each pair holds one queue pair per side.
TEST(VerbsOnDemand, CrossingFirstSendsConnectOncePerPair) {
  const Config config = emulated();
  constexpr int kRanks = 4;
  constexpr uint32_t kPerPeer = 5;
  auto t = connected_world(kRanks, config);
  ASSERT_EQ(t.size(), static_cast<size_t>(kRanks));
  std::vector<std::vector<TransportCompletion>> seen(kRanks);
  // sent[r][p]: notifications rank r has posted to p (tags p * 100 + i).
  std::vector<std::vector<uint32_t>> sent(kRanks, std::vector<uint32_t>(kRanks, 0));
  const auto all_sent = [&] {
    for (int r = 0; r < kRanks; ++r) {
      for (int p = 0; p < kRanks; ++p) {
        if (p != r && sent[r][p] < kPerPeer) return false;
      }
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!all_sent() && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < kRanks; ++r) {
      for (int p = 0; p < kRanks; ++p) {
        if (p == r || sent[r][p] == kPerPeer) continue;
        const Status s = t[r]->notify(p, static_cast<uint32_t>(r * 100 + sent[r][p]));
        if (s.ok()) {
          ++sent[r][p];
        } else {
          ASSERT_EQ(s.code(), StatusCode::kBusy) << r << " -> " << p << ": " << s.to_string();
        }
      }
    }
    for (int r = 0; r < kRanks; ++r) {
      TransportCompletion buf[32];
      const size_t n = t[r]->poll(buf);
      seen[r].insert(seen[r].end(), buf, buf + n);
    }
  }
  ASSERT_TRUE(all_sent());
  ASSERT_TRUE(drive(t, seen, [&] {
    for (int r = 0; r < kRanks; ++r) {
      if (count(seen[r], TransportCompletion::Kind::kNotify) < (kRanks - 1) * kPerPeer) {
        return false;
      }
    }
    return true;
  }));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(count(seen[r], TransportCompletion::Kind::kPeerError), 0u) << "rank " << r;
    EXPECT_EQ(count(seen[r], TransportCompletion::Kind::kNotify), (kRanks - 1) * kPerPeer);
    std::vector<uint32_t> next(kRanks, 0);  // per-sender order
    for (const auto& c : seen[r]) {
      if (c.kind != TransportCompletion::Kind::kNotify) continue;
      EXPECT_EQ(c.tag, static_cast<uint32_t>(c.peer * 100) + next[c.peer]++) << "at rank " << r;
    }
    EXPECT_EQ(t[r]->connected_peers(), static_cast<uint32_t>(kRanks - 1));
    EXPECT_EQ(queue_pairs(*t[r]), static_cast<uint32_t>(kRanks - 1))
        << "rank " << r << ": a crossing left a second queue pair";
  }
}

TEST(VerbsOnDemand, TheStorePathMakesEveryPairAtCreation) {
  Config config = emulated();
  config.ib_connect = IbConnectMode::kStore;
  auto t = connected_world(3, config);
  ASSERT_EQ(t.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(t[r]->capabilities().connects_on_demand);
    EXPECT_EQ(t[r]->connected_peers(), 2u);
    auto a = verbs::decode_address(t[r]->local_address(), r, 3);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a.value().qps.size(), 3u);
  }
}

// A rank offering rdma_cm publishes no queue pairs, so a store-only peer cannot reach it: both
// sides refuse at connect(), naming the peer and what to set (it used to fall back per pair).
TEST(VerbsOnDemand, AJobMixingRdmaCmAndTheStorePathIsRefusedOnBothSides) {
  Config cm = emulated();
  Config store = emulated();
  store.ib_connect = IbConnectMode::kStore;
  TransportParams p0{0, 2, &cm, nullptr, "emu-test", false};
  TransportParams p1{1, 2, &store, nullptr, "emu-test", false};
  auto a = create_transport("verbs", p0);
  auto b = create_transport("verbs", p1);
  ASSERT_TRUE(a.ok() && b.ok());
  for (auto [from, to, peer] : {std::tuple{a.value().get(), b.value().get(), 1},
                                std::tuple{b.value().get(), a.value().get(), 0}}) {
    const Status s = from->connect(peer, to->local_address());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("rank " + std::to_string(peer)), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("EAGERCOMM_IB_CONNECT=store on every rank"), std::string::npos)
        << s.message();
  }
}

#endif  // EAGERCOMM_HAVE_VERBS

}  // namespace
}  // namespace eagercomm::test::verbs_emulated_test
