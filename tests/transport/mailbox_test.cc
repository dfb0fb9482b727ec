// The slotted mailbox: messages arrive intact and in order, credits bound what a sender may
// have outstanding, releasing returns them, a receiver that holds every slot spills one so the
// sender keeps going, the staged path (local slot + write) behaves like the direct one, and a
// peer that breaks the protocol is reported.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/harness/thread_world.h"
#include "transport/mailbox.h"

namespace eagercomm::test {
namespace {

struct Boxes {
  Transports tp;
  std::vector<std::unique_ptr<Mailbox>> box;
  Boxes(int size, MailboxOptions opts) : tp(size) {
    for (int r = 0; r < size; ++r) {
      auto b = Mailbox::create(tp[r], opts);
      EXPECT_TRUE(b.ok()) << b.status().to_string();
      box.push_back(std::move(b).value());
    }
    for (int r = 0; r < size; ++r) {
      for (int p = 0; p < size; ++p) {
        if (p == r) continue;
        EXPECT_TRUE(box[r]->connect_peer(p, box[p]->inbox_key()).ok());
      }
    }
  }
  // Pumps rank r's transport completions through its mailbox; returns the arrived messages.
  std::vector<InMessage*> pump(int r, std::vector<MailboxEvent>* others = nullptr) {
    std::vector<InMessage*> out;
    TransportCompletion c[32];
    size_t n;
    while ((n = tp[r].poll(c)) > 0) {
      for (size_t i = 0; i < n; ++i) {
        MailboxEvent ev = box[r]->on_completion(c[i]);
        if (ev.kind == MailboxEvent::Kind::kMessage)
          out.push_back(ev.message);
        else if (ev.kind != MailboxEvent::Kind::kNone && others)
          others->push_back(ev);
      }
    }
    box[r]->flush();
    return out;
  }
};

void send_text(Mailbox& box, int peer, const std::string& text) {
  SendSlot slot;
  ASSERT_TRUE(box.try_acquire(peer, &slot));
  std::memset(slot.user_header, 0x5a, kUserHeaderBytes);
  std::memcpy(slot.payload, text.data(), text.size());
  ASSERT_TRUE(box.send(slot, text.size()).ok());
}

std::string text_of(const InMessage* m) {
  return std::string(reinterpret_cast<const char*>(m->payload), m->payload_bytes);
}

class MailboxPaths : public ::testing::TestWithParam<bool> {};

TEST_P(MailboxPaths, MessagesArriveInOrderAndCreditsComeBack) {
  Boxes b(2, MailboxOptions{4096, 4, GetParam()});
  EXPECT_EQ(b.box[0]->direct(), GetParam());
  EXPECT_EQ(b.box[0]->credits(1), 4u);
  for (int i = 0; i < 4; ++i) send_text(*b.box[0], 1, "message " + std::to_string(i));
  b.pump(0);  // write completions (staged path)
  EXPECT_EQ(b.box[0]->credits(1), 0u);
  SendSlot none;
  EXPECT_FALSE(b.box[0]->try_acquire(1, &none));
  auto got = b.pump(1);
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(text_of(got[i]), "message " + std::to_string(i));
    EXPECT_EQ(got[i]->user_header[0], 0x5a);
  }
  // Holding all four slots spilled the oldest message: one credit is back already.
  b.pump(0);
  EXPECT_EQ(b.box[1]->stats().spills, 1u);
  EXPECT_TRUE(got[0]->spilled);
  EXPECT_EQ(text_of(got[0]), "message 0");
  EXPECT_EQ(b.box[0]->credits(1), 1u);
  b.box[1]->release(got[2]);
  b.pump(1);
  b.pump(0);
  // The credit waits for return_due_credits() (the engine calls it when idle): one due credit
  // of four slots is less than the half that goes out at once.
  EXPECT_EQ(b.box[0]->credits(1), 1u);
  EXPECT_TRUE(b.box[1]->return_due_credits());
  EXPECT_FALSE(b.box[1]->return_due_credits());
  b.pump(0);
  EXPECT_EQ(b.box[0]->credits(1), 2u);
  // got[0] was spilled (its credit is back); releasing 1 and 3 makes two due: half, so sent.
  for (int i : {0, 1, 3}) b.box[1]->release(got[i]);
  b.pump(1);
  b.pump(0);
  EXPECT_EQ(b.box[0]->credits(1), 4u);
  EXPECT_EQ(b.box[1]->stats().received, 4u);
  EXPECT_EQ(b.box[0]->stats().sent, 4u);
}

TEST_P(MailboxPaths, FullPayloadAndEmptyPayload) {
  Boxes b(3, MailboxOptions{8192, 2, GetParam()});
  const std::string big(b.box[2]->payload_capacity(), 'x');
  send_text(*b.box[2], 0, big);
  send_text(*b.box[2], 0, "");
  b.pump(2);
  auto got = b.pump(0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]->peer, 2);
  EXPECT_EQ(text_of(got[0]), big);
  EXPECT_EQ(got[1]->payload_bytes, 0u);
}

TEST_P(MailboxPaths, HoldingEverySlotSpillsTheOldestSoTheSenderGoesOn) {
  Boxes b(2, MailboxOptions{4096, 3, GetParam()});
  std::vector<InMessage*> held;
  for (int round = 0; round < 5; ++round) {
    // The receiver never releases; the sender must still be able to send forever.
    for (int i = 0; i < 3; ++i) {
      b.pump(0);
      if (b.box[0]->credits(1) == 0) break;
      send_text(*b.box[0], 1, "r" + std::to_string(round) + "m" + std::to_string(i));
    }
    auto got = b.pump(1);
    held.insert(held.end(), got.begin(), got.end());
  }
  EXPECT_GT(b.box[1]->stats().spills, 0u);
  // Every held message, spilled or not, still reads correctly.
  for (size_t i = 0; i < held.size(); ++i) EXPECT_EQ(text_of(held[i]).substr(0, 1), "r");
  for (InMessage* m : held) b.box[1]->release(m);
  b.pump(1);
  b.pump(0);
  EXPECT_EQ(b.box[0]->credits(1), 3u);
}

INSTANTIATE_TEST_SUITE_P(Direct, MailboxPaths, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "direct" : "staged"; });

TEST(Mailbox, BadOptionsAreRejected) {
  Transports tp(1);
  EXPECT_EQ(Mailbox::create(tp[0], MailboxOptions{4096, 1, true}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Mailbox::create(tp[0], MailboxOptions{4096, 65, true}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Mailbox::create(tp[0], MailboxOptions{100, 4, true}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Mailbox, DifferentSlotSettingsBetweenRanksAreDetected) {
  Transports tp(2);
  auto a = Mailbox::create(tp[0], MailboxOptions{4096, 4, true}).value();
  auto b = Mailbox::create(tp[1], MailboxOptions{8192, 4, true}).value();
  Status s = a->connect_peer(1, b->inbox_key());
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_NE(s.message().find("EAGERCOMM_SLOT_BYTES"), std::string::npos);
}

TEST(Mailbox, ProtocolViolationsAreReportedNotObeyed) {
  Boxes b(2, MailboxOptions{4096, 4, true});
  std::vector<MailboxEvent> events;
  // A data tag for a slot nobody filled: no magic in the slot.
  ASSERT_TRUE(b.tp[0].notify(1, mailbox_tag::make(mailbox_tag::kData, 2, 0)).ok());
  // A slot index beyond the configured slots.
  ASSERT_TRUE(b.tp[0].notify(1, mailbox_tag::make(mailbox_tag::kData, 9, 0)).ok());
  // A credit for a slot that was never used.
  ASSERT_TRUE(b.tp[0].notify(1, mailbox_tag::make(mailbox_tag::kCredit, 1, 0)).ok());
  auto got = b.pump(1, &events);
  EXPECT_TRUE(got.empty());
  ASSERT_EQ(events.size(), 3u);
  for (const auto& ev : events) {
    EXPECT_EQ(ev.kind, MailboxEvent::Kind::kError);
    EXPECT_EQ(ev.error.code(), StatusCode::kProtocolError);
    EXPECT_EQ(ev.peer, 0);
  }
}

TEST(Mailbox, ControlCodesPassThrough) {
  Boxes b(2, MailboxOptions{4096, 2, true});
  ASSERT_TRUE(b.box[0]->send_control(1, 0x1234567).ok());
  EXPECT_EQ(b.box[0]->send_control(1, 1u << 28).code(), StatusCode::kInvalidArgument);
  std::vector<MailboxEvent> events;
  b.pump(1, &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, MailboxEvent::Kind::kControl);
  EXPECT_EQ(events[0].control, 0x1234567u);
}

}  // namespace
}  // namespace eagercomm::test
