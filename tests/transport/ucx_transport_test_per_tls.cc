// ucx_transport_test (tests/transport/ucx_transport_test.cc), the UCX-specific cases over
// every UCX_TLS (shm,self; tcp; the default): the Mailbox between processes, back-pressure of
// max_outstanding, regions that outlive the transport and teardown bounded by close_timeout.
#include <gtest/gtest.h>

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_UCX

#include "tests/transport/ucx_transport_test.h"

namespace eagercomm::test::ucx_test {
namespace {

// The slotted mailbox between processes, through mapped slots (shared memory, direct) or
// staging slots + write().
void mailbox_exchange(Ctx& c, bool direct) {
  MailboxOptions opts{16 * 1024, 4, direct};
  auto box = Mailbox::create(*c.t, opts);
  ASSERT_TRUE(box.ok()) << box.status().to_string();
  Mailbox& mb = *box.value();
  c.publish("inbox", mb.inbox_key());
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    Status s = mb.connect_peer(p, c.fetch("inbox", p));
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  constexpr uint32_t kMessages = 200;
  std::vector<uint32_t> sent(c.size, 0), got(c.size, 0);
  auto text = [](int from, int to, uint32_t i) {
    std::string s = std::to_string(from) + "->" + std::to_string(to) + " #" + std::to_string(i);
    s.resize(10 + (i * 97) % 9000, static_cast<char>('a' + i % 26));
    return s;
  };
  auto all_done = [&] {
    for (int p = 0; p < c.size; ++p) {
      if (p != c.rank && (sent[p] < kMessages || got[p] < kMessages)) return false;
    }
    return true;
  };
  const auto deadline = Clock::now() + 60s;
  while (!all_done() && !::testing::Test::HasFailure()) {
    ASSERT_LT(Clock::now(), deadline) << "rank " << c.rank << ": mailbox exchange stalled";
    for (int p = 0; p < c.size; ++p) {
      if (p == c.rank) continue;
      SendSlot slot;
      while (sent[p] < kMessages && mb.try_acquire(p, &slot)) {
        const std::string m = text(c.rank, p, sent[p]);
        std::memset(slot.user_header, 0x40 + c.rank, kUserHeaderBytes);
        std::memcpy(slot.payload, m.data(), m.size());
        Status s = mb.send(slot, m.size());
        ASSERT_TRUE(s.ok()) << s.to_string();
        ++sent[p];
      }
    }
    TransportCompletion buf[32];
    size_t n = c.t->poll(buf);
    for (size_t i = 0; i < n; ++i) {
      MailboxEvent ev = mb.on_completion(buf[i]);
      if (ev.kind == MailboxEvent::Kind::kMessage) {
        InMessage* m = ev.message;
        const std::string want = text(m->peer, c.rank, got[m->peer]);
        ASSERT_EQ(std::string(reinterpret_cast<const char*>(m->payload), m->payload_bytes), want);
        ASSERT_EQ(m->user_header[0], 0x40 + m->peer);
        ++got[m->peer];
        mb.release(m);
      } else if (ev.kind == MailboxEvent::Kind::kError) {
        FAIL() << ev.error.to_string();
      } else {
        ASSERT_NE(ev.kind, MailboxEvent::Kind::kControl);
      }
    }
    mb.flush();
    if (n == 0) c.t->wait(1ms);
  }
  EXPECT_EQ(mb.stats().received, static_cast<uint64_t>(kMessages) * (c.size - 1));
  // Keep delivering credits and write completions until everyone is done.
  ASSERT_TRUE(c.store->add("mailbox-done", 1).ok());
  ASSERT_TRUE(c.pump_until([&] {
    TransportCompletion b[32];
    const size_t k = c.t->poll(b);
    for (size_t i = 0; i < k; ++i) (void)mb.on_completion(b[i]);
    mb.flush();
    return c.store->add("mailbox-done", 0).value() == c.size;
  }));
  c.barrier("mailbox-closed");
}

TEST_P(UcxWorld, MailboxBetweenProcessesDirect) {
  run_world(3, GetParam(), [](Ctx& c) { mailbox_exchange(c, true); });
}

TEST_P(UcxWorld, MailboxBetweenProcessesStaged) {
  run_world(2, GetParam(), [](Ctx& c) { mailbox_exchange(c, false); });
}

// More outstanding operations than allowed give kBusy with nothing delivered; once the peer
// polls again every accepted notification arrives, in order, exactly once.
TEST_P(UcxWorld, BackPressureGivesBusyAndLosesNothing) {
  WorldOptions wo;
  wo.ucx.max_outstanding = 16;
  run_world(
      2, GetParam(),
      [](Ctx& c) {
        constexpr size_t kBytes = 64 * 1024;
        auto mine = c.t->allocate(kBytes, MemoryKind::kHost);
        ASSERT_TRUE(mine.ok());
        c.publish("region", mine.value()->remote_key());
        auto theirs = c.t->import_region(1 - c.rank, c.fetch("region", 1 - c.rank));
        ASSERT_TRUE(theirs.ok());
        c.barrier("ready", c.rank == 0);
        if (c.rank == 0) {
          uint32_t accepted = 0;
          bool busy = false;
          for (int attempt = 0; attempt < 200000 && !busy; ++attempt) {
            Status s = c.t->write(*mine.value(), 0, *theirs.value(), 0, kBytes, accepted, accepted);
            if (s.code() == StatusCode::kBusy) {
              busy = true;
            } else {
              ASSERT_TRUE(s.ok()) << s.to_string();
              ++accepted;
            }
          }
          EXPECT_TRUE(busy) << "no kBusy after " << accepted << " writes to a peer not polling";
          const uint32_t total = accepted + 40;
          ASSERT_TRUE(c.store->set("total", to_bytes(std::to_string(total))).ok());
          while (accepted < total) {
            Status s = c.t->write(*mine.value(), 0, *theirs.value(), 0, kBytes, accepted, accepted);
            if (s.code() == StatusCode::kBusy) {
              if (c.pump() == 0) c.t->wait(1ms);
              continue;
            }
            ASSERT_TRUE(s.ok()) << s.to_string();
            ++accepted;
          }
          ASSERT_TRUE(c.pump_until([&] { return c.done.size() == total; }));
          std::vector<uint64_t> cookies = c.done;
          std::sort(cookies.begin(), cookies.end());
          for (uint32_t i = 0; i < total; ++i) ASSERT_EQ(cookies[i], i);
        } else {
          // Not polling until the sender saw kBusy.
          auto got = c.store->get("total", 60s);
          ASSERT_TRUE(got.ok()) << got.status().to_string();
          const uint32_t total = static_cast<uint32_t>(std::stoul(to_string(got.value())));
          ASSERT_TRUE(c.pump_until([&] { return c.notes.size() >= total; }));
          ASSERT_EQ(c.notes.size(), total);
          for (uint32_t i = 0; i < total; ++i) ASSERT_EQ(c.notes[i].tag, i);
        }
        c.barrier("done");
      },
      wo);
}

// Regions and remotes outlive their transport; destruction is bounded when the peer stopped
// progressing, and that peer survives our departure. Over TCP only notifications go to the
// idle peer: UCX 1.13 answers every emulated put, and aborts the target if the source is gone
// by the time it serves the put (a UCX limitation; the close handshake avoids it whenever the
// target progresses within close_timeout).
TEST_P(UcxWorld, RegionsOutliveTheTransportAndTeardownIsBounded) {
  WorldOptions wo;
  wo.ucx.close_timeout = 500ms;
  run_world(
      2, GetParam(),
      [](Ctx& c) {
        auto mine = c.t->allocate(1 << 20, MemoryKind::kHost);
        ASSERT_TRUE(mine.ok());
        std::vector<uint8_t> user(4096);
        auto reg = c.t->register_memory(user.data(), user.size(), MemoryKind::kHost);
        ASSERT_TRUE(reg.ok());
        c.publish("region", mine.value()->remote_key());
        auto theirs = c.t->import_region(1 - c.rank, c.fetch("region", 1 - c.rank));
        ASSERT_TRUE(theirs.ok());
        const bool mapped = c.t->mapped_address(*theirs.value()) != nullptr;
        c.barrier("ready", c.rank == 0);
        if (c.rank == 0) {
          // Rank 1 has stopped polling: these may stay in flight until we close.
          for (uint32_t i = 0; i < 8; ++i) {
            Status s = mapped ? c.t->write(*mine.value(), 0, *theirs.value(), 0, 1 << 20, i, i)
                              : c.t->notify(1, i);
            ASSERT_TRUE(s.ok() || s.code() == StatusCode::kBusy) << s.to_string();
          }
        }
        c.barrier("wrote", c.rank == 0);
        if (c.rank == 1) {
          auto go = c.store->get("rank0-closed", 60s);  // without polling
          ASSERT_TRUE(go.ok());
        }
        const auto t0 = Clock::now();
        // The transport goes; its regions and the imported remote stay.
        c.t = nullptr;
        c.owned.reset();
        const auto took = Clock::now() - t0;
        EXPECT_LT(took, 10s) << "destruction waited too long for a peer that stopped polling";
        if (c.rank == 0) {
          ASSERT_TRUE(c.store->set("rank0-closed", to_bytes("1")).ok());
        }
        // The memory is still ours to use and release.
        std::memset(mine.value()->data(), 0x5a, mine.value()->size());
        EXPECT_EQ(static_cast<uint8_t*>(mine.value()->data())[12345], 0x5a);
        theirs.value().reset();
        reg.value().reset();
        mine.value().reset();
      },
      wo);
}

}  // namespace
}  // namespace eagercomm::test::ucx_test

#endif  // EAGERCOMM_HAVE_UCX
