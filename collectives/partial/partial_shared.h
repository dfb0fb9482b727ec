// Internal: the state a partial allreduce shares between its application side (post, poll,
// RoundResult) and its engine side (PartialStream). Not installed.
//
// The contribution hand-off is lock-free. `open` names the open round and the buffer that
// collects its posts. A post announces itself on that buffer (writers + 1), re-reads `open`, and
// adds its gradient only if the buffer is still open; the engine activates the round by swapping
// `open` to a fresh buffer, then waits until the old buffer's writers drop to zero before using
// it. Both sides use sequentially consistent operations on `open` and `writers`, so either the
// post sees the swap (and retries on the new buffer) or the engine sees the post's announcement
// (and waits for it): a post is in exactly one round, never torn.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "collectives/engine/small_boxes.h"
#include "collectives/partial_allreduce.h"
#include "runtime/bounded_queue.h"
#include "transport/transport.h"

namespace eagercomm::detail {

class CommCore;

// One contribution / result buffer and what the posts into it recorded.
struct ContributionBuffer {
  std::unique_ptr<MemoryRegion> region;  // transport memory: peers may write into it
  std::atomic<uint32_t> writers{0};
  // Written by posts while announced (writers > 0), read by the engine after the buffer was
  // taken and writers reached zero.
  uint32_t posts = 0;
  bool fresh = false;
  uint64_t min_base = std::numeric_limits<uint64_t>::max();
  uint64_t compute_us = 0;  // the application's compute before the measured posts (RankMeta)
  uint32_t measured = 0;

  // on_failure=continue: the contribution as the round took it (PartialStream::start), kept
  // while the round's data phase overwrites the buffer; a survivor whose round fails carries it.
  std::vector<uint8_t> backup;
  uint32_t backup_posts = 0;

  void* data() const { return region->data(); }
  void reset_meta() {
    posts = 0;
    fresh = false;
    min_base = std::numeric_limits<uint64_t>::max();
    compute_us = 0;
    measured = 0;
  }
};

// A delivered round, engine -> application.
struct RoundRecord {
  uint64_t round = 0;
  uint32_t buffer = 0;
};

// Application -> engine.
struct PartialEvent {
  enum class Kind : uint8_t {
    kPosted,    // a post landed in `round` (`fresh` if it was meant for it)
    kFlushing,  // flush number `round` started: this rank posts no more until it returns
    kForce,     // flush: activate every round up to and including `round`
  };
  Kind kind = Kind::kPosted;
  uint64_t round = 0;
  bool fresh = false;
  uint64_t flush = 0;  // kForce: the flush number
};

struct PartialShared {
  PartialShared(size_t buffers, size_t event_capacity)
      : free_buffers(buffers), results(buffers + 1), events(event_capacity) {}
  // An object's state on `core` (its rank and size): result_depth + 1 buffers in transport
  // memory, round 0 open in buffer 0, no round boxes.
  static Result<std::shared_ptr<PartialShared>> make(std::shared_ptr<CommCore> core,
                                                     uint32_t stream, size_t count, DataType type,
                                                     PartialMode mode,
                                                     const PartialOptions& options);

  // Immutable after creation.
  uint32_t stream = 0;
  int rank = 0;
  int size = 1;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  size_t bytes = 0;       // count elements: what posts add and results show
  size_t tail_bytes = 0;  // the round metadata after them (partial_meta.h)
  PartialMode mode;
  PartialOptions options;
  // Whether the tail has the second section: adaptive objects' compute times, deadline(auto)'s
  // arrival spreads (deadline_tuner.h).
  bool meta_compute() const {
    return mode.kind == PartialKind::kAdaptive ||
           (mode.kind == PartialKind::kDeadline && mode.deadline.count() == 0);
  }
  std::shared_ptr<CommCore> core;  // outlives every buffer (they are its transport's memory)
  // Rounds of up to EAGERCOMM_SMALL_MAX_BYTES on transports that map allocations: every rank
  // stores its contribution into every peer's box of the round, which is also how a peer that
  // has not entered the round learns of it (PartialStream). Null: rounds run as messages.
  std::unique_ptr<SmallBoxes> round_boxes;

  std::vector<std::unique_ptr<ContributionBuffer>> buffers;
  std::atomic<uint64_t> open{0};  // round << 16 | buffer index
  BoundedQueue<uint32_t> free_buffers;
  BoundedQueue<RoundRecord> results;
  BoundedQueue<PartialEvent> events;

  std::atomic<uint64_t> activated{0};  // rounds this rank has activated
  std::atomic<bool> broken{false};     // `error` is set before this turns true
  Status error;
  std::atomic<bool> closed{false};
  // Flush exchanges this rank has joined (application thread); a leaving rank tells its peers.
  std::atomic<uint64_t> flushes_joined{0};
  // Set before `broken`: when the failure comes only from peers that left after joining flush
  // exchanges up to this number, a flush with a number no higher still ends well if its round
  // comes before the failed ones (0: any other failure).
  std::atomic<uint64_t> failure_spares_flush{0};

  std::atomic<uint64_t> posts{0};
  std::atomic<uint64_t> late_posts{0};
  std::atomic<uint64_t> dropped_posts{0};
  std::atomic<uint64_t> delivered{0};

  static uint64_t pack(uint64_t round, uint32_t buffer) { return (round << 16) | buffer; }
  static uint64_t open_round(uint64_t packed) { return packed >> 16; }
  static uint32_t open_buffer(uint64_t packed) { return static_cast<uint32_t>(packed & 0xffff); }

  // Rounds that are synchronous whatever was measured (identical on every rank); adaptive rounds
  // may be too (PartialStream, adaptive_regime.h).
  bool synchronous(uint64_t round) const {
    return mode.kind == PartialKind::kSync ||
           (options.sync_every > 0 && (round + 1) % options.sync_every == 0);
  }
  int coordinator(uint64_t round) const { return static_cast<int>(round % size); }
  int initiator(uint64_t round) const;  // majority: drawn from (seed, round)

  // Where buffer `b`'s metadata tail starts.
  void* tail(uint32_t b) const { return static_cast<uint8_t*>(buffers[b]->data()) + bytes; }
  // Gives a released buffer back (application thread), ready to be opened again: its data is
  // overwritten by the first post or zeroed when the round starts without one.
  void recycle(uint32_t buffer);
};

}  // namespace eagercomm::detail
