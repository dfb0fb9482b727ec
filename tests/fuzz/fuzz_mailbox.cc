// libFuzzer target: what a peer can make a rank read through shared memory and notifications:
// the mailbox's tags and slot headers (mailbox.h) and the small-collective boxes' sequence words
// (collectives/engine/small_boxes.h), over the inproc transport (ranks 0 and 1 of one process).
// Each input is a script of 8-byte steps run against a fresh pair of mailboxes and boxes, playing
// rank 0 as a hostile peer of rank 1: stores of arbitrary words into rank 1's inbox and box
// region, notifications with arbitrary tags and sender ranks, releases of held messages, peeks.
// Every step must end in an event or a Status; an accepted message must lie inside its slot.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "collectives/config.h"
#include "collectives/engine/small_boxes.h"
#include "runtime/log.h"
#include "runtime/store.h"
#include "transport/mailbox.h"
#include "transport/registry.h"

using namespace eagercomm;

namespace {

constexpr MailboxOptions kOptions{256, 4, true};
constexpr size_t kBoxBytes = 64;

struct World {
  Config config;
  HashStore store;
  std::unique_ptr<Transport> t[2];
  World() {
    // The mailbox logs every protocol error it reports; here they are the point, not news.
    log_detail::g_subsys_mask.store(0);
    for (int r = 0; r < 2; ++r) {  // rank 0 publishes the fabric first: no threads needed
      auto made = create_transport("inproc", TransportParams{r, 2, &config, &store, "fuzz"});
      if (!made.ok()) std::abort();
      t[r] = std::move(made).value();
    }
  }
};

World& world() {
  static World* w = new World;  // never destroyed: inputs run until the process exits
  return *w;
}

uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint8_t* mapped(Transport& from, int peer, std::span<const uint8_t> key,
                std::unique_ptr<RemoteRegion>* keep) {
  auto r = from.import_region(peer, key);
  if (!r.ok()) std::abort();
  *keep = std::move(r).value();
  return static_cast<uint8_t*>(from.mapped_address(**keep));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  std::unique_ptr<Mailbox> box[2];
  std::unique_ptr<detail::SmallBoxes> boxes[2];
  for (int r = 0; r < 2; ++r) {
    auto b = Mailbox::create(*w.t[r], kOptions);
    auto s = detail::SmallBoxes::create(*w.t[r], kBoxBytes);
    if (!b.ok() || !s.ok()) std::abort();
    box[r] = std::move(b).value();
    boxes[r] = std::move(s).value();
  }
  for (int r = 0; r < 2; ++r) {
    if (!box[r]->connect_peer(1 - r, box[1 - r]->inbox_key()).ok()) std::abort();
    if (!boxes[r]->connect_peer(1 - r, boxes[1 - r]->key()).ok()) std::abort();
  }
  // Rank 0's view of rank 1's memory: the slots rank 0 may write, and (past them) every byte of
  // the region, which a peer with a mapping can reach as well.
  std::unique_ptr<RemoteRegion> inbox_region, box_region;
  uint8_t* inbox = mapped(*w.t[0], 1, box[1]->inbox_key(), &inbox_region);
  uint8_t* region = mapped(*w.t[0], 1, boxes[1]->key(), &box_region);
  const size_t inbox_bytes = inbox_region->size();
  const size_t region_bytes = box_region->size();
  std::vector<InMessage*> held;
  for (size_t at = 0; at + 8 <= size; at += 8) {
    const uint8_t* op = data + at;
    const uint32_t word = u32(op + 4);
    const size_t offset = op[1] | static_cast<size_t>(op[2]) << 8;
    switch (op[0] % 6) {
      case 0:  // a store into rank 1's inbox
        std::memcpy(inbox + offset % (inbox_bytes - 3), &word, sizeof(word));
        break;
      case 1: {  // a notification; the sender rank may be impossible
        const int peer = static_cast<int>(op[3] % 4) - 1;
        const MailboxEvent ev = box[1]->on_completion(
            TransportCompletion{TransportCompletion::Kind::kNotify, peer, word, 0});
        if (ev.kind == MailboxEvent::Kind::kMessage) {
          const InMessage* m = ev.message;
          const auto* base = static_cast<const uint8_t*>(inbox);
          if (m->peer != 0 || m->payload_bytes > box[1]->payload_capacity() || m->payload < base ||
              m->payload + m->payload_bytes > base + inbox_bytes) {
            std::abort();
          }
          held.push_back(ev.message);
        } else if (ev.kind == MailboxEvent::Kind::kError && ev.error.ok()) {
          std::abort();  // an error event must say what went wrong
        }
        break;
      }
      case 2:  // rank 1 is done with a message
        if (!held.empty()) {
          const size_t i = op[1] % held.size();
          box[1]->release(held[i]);
          held.erase(held.begin() + static_cast<ptrdiff_t>(i));
        }
        break;
      case 3:  // a write completion: its cookie is the mailbox's own (a slot index), not the peer's
        box[1]->on_completion(
            TransportCompletion{TransportCompletion::Kind::kWriteDone, op[3] % 2, 0, word % 64});
        break;
      case 4:  // a store into rank 1's small-box region
        std::memcpy(region + offset % (region_bytes - 3), &word, sizeof(word));
        break;
      case 5: {  // rank 1 looks for rank 0's contribution to call `seq`
        const uint64_t seq = op[1] % 32;
        boxes[1]->begin_call(seq);
        detail::OpSignature sig;
        const uint8_t* payload = nullptr;
        Result<bool> got = boxes[1]->peek(0, seq, &sig, &payload);
        if (got.ok() && got.value()) {
          if (payload < region || payload + kBoxBytes > region + region_bytes) std::abort();
          if (op[3] & 1) boxes[1]->consume(0, seq);
        }
        if (op[3] & 2) boxes[1]->end_call(seq);
        break;
      }
    }
    box[1]->flush();
    box[1]->return_due_credits();
  }
  // Rank 0 takes whatever rank 1 sent it (credits): the transports outlive this input.
  TransportCompletion c[64];
  for (int r = 0; r < 2; ++r) {
    while (size_t n = w.t[r]->poll(c)) {
      for (size_t i = 0; i < n; ++i) {
        if (r == 0) box[0]->on_completion(c[i]);
      }
    }
  }
  return 0;
}
