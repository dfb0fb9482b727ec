// Per-rank resources that grow with log P (issue 21): which peers get data slots, the mailbox
// layout built on that, a mailbox that refuses a payload for a peer with control slots only,
// and a bootstrap whose store traffic is O(1) requests per rank outside the address exchange.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "collectives/algorithms/algorithms.h"
#include "collectives/communicator.h"
#include "collectives/config.h"
#include "collectives/engine/partner_layout.h"
#include "runtime/store.h"
#include "tests/harness/forwarding_store.h"
#include "tests/harness/thread_world.h"
#include "transport/mailbox.h"

namespace eagercomm::test {
namespace {

using detail::data_partners;
using detail::partner_mailbox_layout;

int log2_ceil(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

// The peers recursive doubling talks to, written out from its description (allreduce_rd.cc):
// with p2 the largest power of two <= P and rem = P - p2, even ranks below 2 rem send to the
// next odd one and wait; odd ones below 2 rem are doubling rank r / 2, the others r - rem; the
// doubling rank n pairs with n ^ 2^k, whose real rank is 2 m + 1 below rem, m + rem above.
std::set<int> rd_peers(int r, int P) {
  std::set<int> out;
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  const int rem = P - p2;
  if (r < 2 * rem && r % 2 == 0) return {r + 1};
  if (r < 2 * rem) out.insert(r - 1);
  const int n = r < 2 * rem ? r / 2 : r - rem;
  for (int k = 1; k < p2; k *= 2) {
    const int m = n ^ k;
    out.insert(m < rem ? 2 * m + 1 : m + rem);
  }
  return out;
}

TEST(PeerLayout, DataPartnersAreSymmetricAndCoverEveryMailboxAlgorithm) {
  for (int P = 1; P <= 130; ++P) {
    std::vector<std::set<int>> sets(P);
    for (int r = 0; r < P; ++r) {
      const std::vector<int> v = data_partners(r, P);
      ASSERT_TRUE(std::is_sorted(v.begin(), v.end())) << "P=" << P << " rank " << r;
      sets[r] = std::set<int>(v.begin(), v.end());
      ASSERT_EQ(sets[r].size(), v.size()) << "duplicates, P=" << P;
      ASSERT_EQ(sets[r].count(r), 0u) << "itself, P=" << P;
    }
    for (int r = 0; r < P; ++r) {
      for (int q : sets[r]) {
        ASSERT_EQ(sets[q].count(r), 1u) << "P=" << P << ": " << r << " -> " << q << " only";
      }
      // Ring and chain neighbours, trees from every root, barrier.
      for (int d = 1; d < P; d *= 2) {
        EXPECT_EQ(sets[r].count((r + d) % P), 1u) << "P=" << P << " rank " << r << " +" << d;
        EXPECT_EQ(sets[r].count((r - d + P) % P), 1u) << "P=" << P << " rank " << r << " -" << d;
      }
      for (int q : rd_peers(r, P)) {
        EXPECT_EQ(sets[r].count(q), 1u) << "P=" << P << " rank " << r << " rd partner " << q;
      }
    }
  }
}

TEST(PeerLayout, DataPartnersGrowWithLogP) {
  // Issue 21's target: at most 2 log2 P + 4 connections that carry data. Powers of two meet it
  // (the doubling partners are among r +- 2^k); other sizes add the doubling partners of the
  // folded ranks, at most log2 P more.
  for (int P : {2, 4, 8, 64, 1024, 4096}) {
    size_t most = 0;
    for (int r = 0; r < P; ++r) most = std::max(most, data_partners(r, P).size());
    EXPECT_LE(most, static_cast<size_t>(2 * log2_ceil(P) + 4)) << "P=" << P;
  }
  for (int P : {3, 6, 100, 1000, 3000}) {
    size_t most = 0;
    for (int r = 0; r < P; ++r) most = std::max(most, data_partners(r, P).size());
    EXPECT_LE(most, static_cast<size_t>(3 * log2_ceil(P) + 4)) << "P=" << P;
  }
}

TEST(PeerLayout, SlotsTileEveryInboxAndAgreeBothWays) {
  const SlotShape data{8, 256 * 1024};
  for (int P : {2, 3, 5, 8, 13, 64, 100}) {
    for (int r = 0; r < P; ++r) {
      auto layout = partner_mailbox_layout(r, P, data);
      auto other = partner_mailbox_layout((r + 1) % P, P, data);  // a peer evaluating the rule
      const std::vector<int> partners = data_partners(r, P);
      std::vector<std::pair<size_t, size_t>> spans;
      for (int s = 0; s < P; ++s) {
        if (s == r) continue;
        const SlotShape a = layout->shape(r, s);
        const SlotShape b = layout->shape(s, r);
        EXPECT_EQ(a.slots, b.slots) << "P=" << P << " " << r << "/" << s;
        EXPECT_EQ(a.slot_bytes, b.slot_bytes);
        EXPECT_EQ(other->shape(r, s).slots, a.slots);
        EXPECT_EQ(other->offset(r, s), layout->offset(r, s));
        const int d = (s - r + P) % P;
        const bool partner = std::binary_search(partners.begin(), partners.end(), s);
        if (d == 1 || d == P - 1) {
          EXPECT_EQ(a.slots, data.slots);
        } else if (partner) {
          EXPECT_EQ(a.slots, data.slots / 2);
        } else {
          EXPECT_EQ(a.slots, detail::kControlSlots);
          EXPECT_EQ(a.slot_bytes, detail::kControlSlotBytes);
        }
        if (partner) {
          EXPECT_EQ(a.slot_bytes, data.slot_bytes);
        }
        spans.emplace_back(layout->offset(r, s), a.bytes());
      }
      std::sort(spans.begin(), spans.end());
      size_t at = 0;
      for (auto [off, len] : spans) {
        EXPECT_EQ(off, at) << "P=" << P << " rank " << r << ": a gap or an overlap";
        at = off + len;
      }
      EXPECT_EQ(at, layout->inbox_bytes(r)) << "P=" << P;
      EXPECT_EQ(other->inbox_bytes(r), layout->inbox_bytes(r));
    }
  }
}

TEST(PeerLayout, MailboxMemoryAtThousandsOfRanksMeetsTheTarget) {
  // Issue 21: at most 64 MiB of mailbox per rank at P = 1024, with the default slots
  // (8 x 256 KiB), staged (twice the inbox) included.
  const SlotShape data{8, 256 * 1024};
  for (int P : {1024, 4096}) {
    uint64_t most = 0;
    for (int r = 0; r < P; r += 7) {
      most = std::max(most, mailbox_registered_bytes(*partner_mailbox_layout(r, P, data), r, true));
    }
    if (P == 1024) {
      EXPECT_LE(most, uint64_t{64} << 20);
    }
    EXPECT_LT(most, uint64_t{128} << 20) << "P=" << P;
  }
  // What every rank kept before: P slots areas of 2 MiB.
  EXPECT_EQ(mailbox_registered_bytes(*uniform_mailbox_layout(1024, data), 0, false),
            uint64_t{1023} * 2 << 20);
}

// Mailboxes of 8 inproc endpoints under the partner layout: data to a partner, text to a
// control peer, and a payload too large for a control peer's slot refused (nothing written).
TEST(PeerLayout, AControlPeerTakesTextButNotData) {
  constexpr int P = 8;
  Transports tp(P);
  std::vector<std::unique_ptr<Mailbox>> box;
  for (int r = 0; r < P; ++r) {
    auto b = Mailbox::create(tp[r], MailboxOptions{4096, 4, true},
                             partner_mailbox_layout(r, P, SlotShape{4, 4096}));
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    box.push_back(std::move(b).value());
  }
  for (int r = 0; r < P; ++r) {
    for (int p = 0; p < P; ++p) {
      if (p != r) {
        ASSERT_TRUE(box[r]->connect_peer(p, box[p]->inbox_key()).ok());
      }
    }
  }
  // At P = 8 rank 0's data partners are 1, 2, 4, 6, 7; 3 and 5 get control slots.
  EXPECT_EQ(box[0]->stats().data_peers, 5u);
  EXPECT_EQ(box[0]->payload_capacity(4), 4096 - kSlotHeaderBytes);
  EXPECT_EQ(box[0]->payload_capacity(3), detail::kControlSlotBytes - kSlotHeaderBytes);
  EXPECT_EQ(box[0]->slots(3), detail::kControlSlots);
  EXPECT_EQ(box[0]->slots(2), 2u);

  auto send = [&](int from, int to, size_t bytes, uint8_t fill) {
    SendSlot slot;
    EXPECT_TRUE(box[from]->try_acquire(to, &slot));
    std::memset(slot.user_header, 0, kUserHeaderBytes);
    std::memset(slot.payload, fill, std::min(bytes, box[from]->payload_capacity(to)));
    return box[from]->send(slot, bytes);
  };
  auto receive = [&](int r) {
    std::vector<InMessage*> out;
    TransportCompletion c[16];
    size_t n;
    while ((n = tp[r].poll(c)) > 0) {
      for (size_t i = 0; i < n; ++i) {
        MailboxEvent ev = box[r]->on_completion(c[i]);
        EXPECT_NE(ev.kind, MailboxEvent::Kind::kError) << ev.error.to_string();
        if (ev.kind == MailboxEvent::Kind::kMessage) out.push_back(ev.message);
      }
    }
    return out;
  };
  // Every sender's slots land where its receiver looks: all 7 peers send to rank 5 at once.
  for (int from = 0; from < P; ++from) {
    if (from == 5) continue;
    const size_t bytes = box[from]->payload_capacity(5);
    ASSERT_TRUE(send(from, 5, bytes, static_cast<uint8_t>(0x10 + from)).ok());
  }
  std::vector<InMessage*> got = receive(5);
  ASSERT_EQ(got.size(), 7u);
  for (InMessage* m : got) {
    ASSERT_EQ(m->payload_bytes, box[5]->payload_capacity(m->peer));
    for (size_t i = 0; i < m->payload_bytes; ++i) {
      ASSERT_EQ(m->payload[i], 0x10 + m->peer) << "from rank " << m->peer << " byte " << i;
    }
    box[5]->release(m);
  }
  // A data-sized payload for control peer 3: refused, naming the peer and its slots.
  const Status refused = send(0, 3, 2000, 0x77);
  EXPECT_EQ(refused.code(), StatusCode::kInternal);
  EXPECT_NE(refused.message().find("rank 3"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("control"), std::string::npos) << refused.message();
  EXPECT_TRUE(receive(3).empty());
  EXPECT_EQ(box[0]->credits(3), detail::kControlSlots);  // the slot went back
}

// A store that counts the requests for each key family (the key with its trailing rank cut).
class CountingStore final : public Store {
 public:
  Status set(const std::string& key, const Bytes& value) override {
    count("set", key);
    return inner_.set(key, value);
  }
  Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) override {
    count("get", key);
    return inner_.get(key, timeout);
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    count("add", key);
    return inner_.add(key, delta);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) override {
    for (const auto& k : keys) count("wait", k);
    return inner_.wait(keys, timeout);
  }
  // Requests of `op` for the key `name` under any scope.
  int64_t total(const std::string& op, const std::string& name) {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (const auto& [k, c] : counts_) {
      if (k.first == op && k.second.ends_with("/" + name)) n += c;
    }
    return n;
  }
  // Requests of `op` for keys `family`<r> with r != 0 (not the flags `family`all, `family`count).
  int64_t others(const std::string& op, const std::string& family) {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (const auto& [k, c] : counts_) {
      if (k.first != op) continue;
      const auto at = k.second.find("/" + family);
      if (at == std::string::npos) continue;
      const std::string rank = k.second.substr(at + 1 + family.size());
      const bool numbered = !rank.empty() && rank.find_first_not_of("0123456789") == rank.npos;
      if (numbered && rank != "0") n += c;
    }
    return n;
  }

 private:
  void count(const char* op, const std::string& key) {
    std::lock_guard lock(mu_);
    ++counts_[{op, key}];
  }
  HashStore inner_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> counts_;
};

TEST(PeerLayout, BootstrapStoreTrafficIsLinearInP) {
  constexpr int P = 12;
  CountingStore store;
  std::vector<std::unique_ptr<Communicator>> comms(P);
  run_threads(P, [&](int r) {
    CommunicatorOptions opts;
    opts.scope = "counted";
    auto c = Communicator::create(store, r, P, opts);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    comms[r] = std::move(c).value();
  });
  run_threads(P, [&](int r) { EXPECT_TRUE(comms[r]->barrier().ok()); });
  // Sizes and settings are compared with rank 0's only; the waits for everybody look at one
  // flag, never at every rank's key (which was P^2 requests).
  EXPECT_EQ(store.others("get", "size/"), 0);
  EXPECT_EQ(store.others("get", "smallmax/"), 0);
  EXPECT_EQ(store.others("get", "connected/"), 0);
  EXPECT_EQ(store.others("wait", "size/"), 0);
  EXPECT_EQ(store.others("wait", "connected/"), 0);
  // Endpoints: each rank sets one value, rank 0 reads the others' (P - 1 gets) into one table
  // that every rank reads once; reading every peer's keys was 2 P (P - 1) gets.
  EXPECT_EQ(store.others("get", "peer/"), P - 1);
  EXPECT_EQ(store.others("set", "peer/"), P - 1);
  EXPECT_EQ(store.others("wait", "peer/"), 0);
  EXPECT_LE(store.total("get", "peers"), 2 * P);  // each rank's read (a wait may retry it)
}

// A table of endpoints that does not parse (a store that cut it short) fails the ranks that read
// it with kProtocolError naming the table; rank 0, which built it, hears of their failure instead
// of waiting for them until its timeout.
class CuttingStore final : public ForwardingStore {
 public:
  Status set(const std::string& key, const Bytes& value) override {
    if (!key.ends_with("/peers")) return inner_.set(key, value);
    return inner_.set(key, Bytes(value.begin(), value.end() - 3));
  }
};

TEST(PeerLayout, AMalformedTableOfEndpointsIsNamed) {
  constexpr int P = 3;
  CuttingStore store;
  Config config = Config::load({{"EAGERCOMM_TIMEOUT", "60s"}}).value();
  std::vector<Status> made(P);
  const auto start = std::chrono::steady_clock::now();
  run_threads(P, [&](int r) {
    CommunicatorOptions opts;
    opts.scope = "cut";
    opts.config = &config;
    made[r] = Communicator::create(store, r, P, opts).status();
  });
  for (int r = 1; r < P; ++r) {
    EXPECT_EQ(made[r].code(), StatusCode::kProtocolError) << made[r].to_string();
    EXPECT_NE(made[r].message().find("table of endpoints"), std::string::npos) << made[r].message();
  }
  EXPECT_FALSE(made[0].ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace eagercomm::test
