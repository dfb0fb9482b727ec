// Partial allreduce (docs/ARCHITECTURE.md, "Partial allreduce"): the eager-SGD collective that
// stops fast ranks from waiting for slow ones.
//
// A PartialAllreduce is a persistent object made once per gradient buffer (collectively, by every
// rank of a communicator, with the same arguments). It runs *rounds*. Every rank posts its
// gradients into an open contribution at its own pace; when a round activates, every rank's
// engine takes whatever that rank has posted so far as its contribution (zeros, or carried late
// gradients, for a rank that has not posted) and the round's data phase sums the contributions.
// Every rank receives every round's result, in round order, bit-identical on every rank.
//
//   auto pa = PartialAllreduce::create(comm, n, DataType::kFloat32, PartialMode::solo());
//   for (step ...) {
//     compute(grad);
//     pa.value()->post(grad.data(), n, DataType::kFloat32);
//     // apply what has completed; wait only if nothing completed since the previous post
//     while (auto r = pa.value()->poll(); r.ok() && r.value()) apply(*r.value());
//   }
//   pa.value()->flush(apply);   // drains everything carried: every post applied exactly once
//
// Modes (who activates round r; only fresh posts, those meant for round r, count):
//   solo        the first post for round r, on any rank;
//   majority    the post for round r of its initiator, a rank drawn from a PRNG shared by all
//               ranks (seed, r): in expectation at least half the contributions are fresh;
//   quorum(k)   the round's coordinator (rank r mod P), once k ranks have posted fresh for r:
//               at least k contributions are fresh, guaranteed;
//   sync        quorum(P): a synchronous allreduce of every rank's fresh gradient;
//   deadline(T) the round's coordinator (rank r mod P), once every rank has posted fresh for r
//               or T has passed since the first fresh post for r reached it, whichever comes
//               first: a straggler costs the others at most T (plus the activation) per round.
//               deadline(auto): T follows the arrival spread that the rounds' metadata carries
//               (twice the median, over the last 16 rounds, of how long after the first post
//               all but a tenth of the ranks had posted; at least 50 us); rounds wait for
//               everybody until 16 rounds were measured. T is measured from the coordinator's first
//               arrival (one message after the first post when the poster is another rank);
//   adaptive    per window of rounds, solo or sync: solo while solo rounds are predicted to make
//               an epoch at least `solo_speedup` times faster than synchronous ones, from the
//               compute times the rounds' metadata carries (every rank's time outside this
//               object's calls before each post); synchronous otherwise and at the start.
//               Every rank decides the same from the same numbers.
// Every sync_every-th round (option) is synchronous whatever the mode, which bounds staleness:
// for a rank that takes a result between its posts (EagerSgd's loop), every post lands at most
// sync_every - 1 rounds after the round it was meant for. A rank that posts again before taking
// a result has both posts meant for one round; the second may land later than that.
//
// Fresh and late: a post is meant for the round after the last result this rank has taken
// (poll/wait), i.e. it was computed on the model every result so far was applied to. It is fresh
// if it lands in that round; late if that round had already activated. Under late=carry (the
// default) a late post is contributed to the next round, never lost; under late=drop it is
// discarded and counted (the paper's reference behaviour). A rank that calls wait() having
// taken every result, with posts in the open round, counts as arrived there as well (so
// several posts before taking a result cannot leave the round waiting for a post that never
// comes).
//
// Back-pressure, not overwrite: a rank holds at most result_depth rounds that have activated but
// whose RoundResult it has not released yet. When it is full it stops taking part in new rounds
// (the others then wait for it) until the application consumes results. RoundResult owns its
// buffer: release it (let it go out of scope) promptly.
//
// Progress: rounds need every rank's engine. With EAGERCOMM_PROGRESS_THREAD=auto (default) or on,
// creating a partial allreduce starts the communicator's progress thread, so a rank takes part
// in rounds while its application thread computes. With off, rounds progress only inside
// post/poll/wait/flush calls.
//
// Threading: one application thread at a time per object (post, poll, wait, flush); the object
// may be used while other threads use the communicator for ordinary collectives.
//
// Continuing through a failure (options.on_failure = OnFailure::kContinue): when a rank dies or
// is declared hung, the call that meets the failure (post, poll, wait, flush) shrinks the
// communicator to the survivors (Communicator::shrink(), in place: the communicator must outlive
// the object, and no other thread may use it meanwhile), and the object goes on over them. Every
// survivor decides the same, whatever it had seen: the results of every round that completed on
// any survivor reach all of them (the dead rank's last contribution is in every survivor's
// results or in none), the survivors' contributions to rounds that completed nowhere are carried
// into the new group's next round (conservation over the survivors' posts), and rounds go on
// numbered from there with RoundResult::ranks() the new size. quorum(k) becomes
// quorum(min(k, size)); rounds run as messages afterwards; lateness() restarts over the new group.
// A rank that only destroys its object, or its communicator, while the others go on is not a
// failure survived: the survivors wait for it in shrink() until EAGERCOMM_TIMEOUT and then leave it
// out. Costs while nothing fails: one copy of each round's contribution when it starts and of each
// result taken (result_depth + 2 kept).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "runtime/memory.h"
#include "runtime/status.h"

namespace eagercomm {

class Communicator;

namespace detail {
struct PartialShared;
}  // namespace detail

enum class PartialKind : uint8_t {
  kSync = 0,
  kSolo = 1,
  kMajority = 2,
  kQuorum = 3,
  kAdaptive = 4,
  kDeadline = 5
};

struct PartialMode {
  PartialKind kind = PartialKind::kSolo;
  int quorum = 0;  // k, for kQuorum
  // T, for kDeadline: 1 us .. kMaxDeadline; zero: auto (derived from the arrival spread).
  std::chrono::microseconds deadline{0};
  static constexpr std::chrono::seconds kMaxDeadline{3600};

  static PartialMode sync() { return {PartialKind::kSync, 0}; }
  static PartialMode solo() { return {PartialKind::kSolo, 0}; }
  static PartialMode majority() { return {PartialKind::kMajority, 0}; }
  static PartialMode quorum_of(int k) { return {PartialKind::kQuorum, k}; }
  static PartialMode adaptive() { return {PartialKind::kAdaptive, 0}; }
  static PartialMode deadline_of(std::chrono::microseconds t) {
    return {PartialKind::kDeadline, 0, t};
  }
  static PartialMode deadline_auto() { return {PartialKind::kDeadline, 0, {}}; }
  // "sync", "solo", "majority", "quorum(3)", "adaptive", "deadline(5ms)", "deadline(auto)".
  std::string name() const;
};

// Accepts "sync", "solo", "majority", "adaptive", "quorum:K", "quorum(K)", "deadline:T" and
// "deadline(T)" with T a duration ("500us", "5ms", "2s") or "auto".
Result<PartialMode> parse_partial_mode(std::string_view text);

enum class LatePolicy : uint8_t { kCarry = 0, kDrop = 1 };

// What a peer that dies or is declared hung does to a partial allreduce.
enum class OnFailure : uint8_t {
  kFail = 0,      // its rounds fail: post, poll, wait and flush return kPeerFailed naming it
  kContinue = 1,  // the survivors shrink the communicator and go on (see "Continuing" above)
};

// Accepts "fail" and "continue"; the error quotes the text and names both.
Result<OnFailure> parse_on_failure(std::string_view text);

struct PartialOptions {
  LatePolicy late = LatePolicy::kCarry;
  uint32_t sync_every = 0;    // every N-th round is synchronous; 0: never
  uint64_t seed = 0;          // shared PRNG seed (majority initiators)
  uint32_t result_depth = 4;  // rounds a rank may hold unreleased (1 .. 1024)
  // adaptive: the speedup per epoch that solo rounds must promise over synchronous ones to be
  // run (their stale gradients cost accuracy); 1 .. kMaxSoloSpeedup, kept to 1/1000.
  static constexpr double kMaxSoloSpeedup = 10.0;
  double solo_speedup = 1.3;
  OnFailure on_failure = OnFailure::kFail;
};

// One round's result. Move-only; owns the result buffer until destroyed.
class RoundResult {
 public:
  RoundResult(RoundResult&&) noexcept;
  RoundResult& operator=(RoundResult&&) noexcept;
  ~RoundResult();

  uint64_t round() const { return round_; }
  // The communicator's size: ranks 0 .. ranks() - 1 have metadata below.
  int ranks() const { return size_; }
  // Ranks whose contribution held a post meant for this round.
  int fresh_count() const;
  bool fresh(int rank) const;
  // Ranks that contributed any data (fresh or carried).
  int contributors() const;
  // Age in rounds of `rank`'s oldest post in this round (0: fresh); -1 when it had no data.
  // Kept to 65534 (a contribution enters the next round its rank takes part in, so ages stay
  // near the result depth).
  int age(int rank) const;
  // The oldest carried gradient's age over all ranks (0 when everything was fresh or empty).
  int max_age() const;
  // Posts `rank` folded into its contribution (kept to 32767).
  int posts(int rank) const;

  // The sum of the contributions: count() elements of type().
  // The metadata accessors above read the buffer too: a released (moved-from) result answers
  // as if no rank contributed.
  const void* data() const { return data_; }
  size_t count() const { return count_; }
  DataType type() const { return type_; }
  template <class T>
  std::span<const T> as() const {
    return {static_cast<const T*>(data_), count_};
  }
  // Copies the result (count() elements) to `dst`, CUDA device memory or host memory: results
  // stay in host memory, this is how a rank training on a GPU applies them. A device `dst` is
  // written after the work enqueued on `stream` before the call (CudaStream, runtime/memory.h;
  // the form without one: the legacy default stream), and is complete when it returns.
  Status copy_to(void* dst, CudaStream stream) const;
  Status copy_to(void* dst) const;

 private:
  friend class PartialAllreduce;  // makes them
  RoundResult() = default;
  void release();

  uint64_t round_ = 0;
  int size_ = 0;
  const void* data_ = nullptr;
  size_t count_ = 0;
  DataType type_ = DataType::kFloat32;
  std::shared_ptr<detail::PartialShared> owner_;
  uint32_t buffer_ = 0;
  std::shared_ptr<const std::vector<uint8_t>> bytes_;  // a result a survivor passed on
};

struct PartialStats {
  uint64_t posts = 0;          // post() calls that added data
  uint64_t late_posts = 0;     // of those, posts that missed the round they were meant for
  uint64_t dropped_posts = 0;  // late posts discarded (late=drop)
  uint64_t rounds_activated = 0;
  uint64_t rounds_delivered = 0;
  // Rounds exchange through boxes of the object's own (rounds of up to EAGERCOMM_SMALL_MAX_BYTES
  // on inproc and shm: one store per peer, no messages) rather than as messages.
  bool rounds_in_boxes = false;
};

// Straggler attribution: how often and how late one rank's contributions were, over the rounds
// this rank has taken. Every rank takes the same rounds with the same metadata, so every rank
// has the same figures (PartialAllreduce::lateness()). EAGERCOMM_STRAGGLER_REPORT=N makes rank 0
// log every N rounds the ranks that were not fresh in at least half of them.
struct RankLateness {
  uint64_t rounds = 0;       // rounds taken
  uint64_t posts = 0;        // its posts those rounds summed
  uint64_t fresh = 0;        // rounds whose contribution from it held a post meant for the round
  uint64_t late = 0;         // rounds in which it contributed posts carried from earlier rounds
  uint64_t absent = 0;       // rounds it contributed nothing to
  uint64_t late_rounds = 0;  // how many rounds late its oldest carried post was, summed over those
  int max_age = 0;           // the latest of them, in rounds
  // late_rounds times the mean time between rounds measured on this rank: an estimate of the
  // time its late posts were late by, summed (the rounds carry no arrival times).
  double late_seconds = 0;
  // Its posts that missed the round they were meant for, as a fraction of its posts (0 before
  // any): how often it was the straggler. (A round it had no post for is not a miss: under solo
  // there are more rounds than any rank's posts.)
  double late_fraction() const {
    return posts > fresh ? static_cast<double>(posts - fresh) / static_cast<double>(posts) : 0;
  }
};

class PartialAllreduce {
 public:
  // Collective: every rank of `comm` calls it, in the same order relative to its other
  // create() calls, with the same arguments. Arguments that are out of range or differ between
  // ranks fail on every rank with a message naming the rank and the argument.
  static Result<std::unique_ptr<PartialAllreduce>> create(Communicator& comm, size_t count,
                                                          DataType type, PartialMode mode,
                                                          const PartialOptions& options = {});
  ~PartialAllreduce();  // destroy()
  PartialAllreduce(const PartialAllreduce&) = delete;
  PartialAllreduce& operator=(const PartialAllreduce&) = delete;

  // Adds `gradient` (count elements of type, as created) into this rank's open contribution.
  // Never waits for other ranks. `gradient` may be CUDA device memory: it is copied to host
  // memory first, after the work enqueued on `stream` before the call (CudaStream,
  // runtime/memory.h: the kernel that computed the gradient; the form without one: the legacy
  // default stream, which does not wait for the application's non-blocking streams), and the
  // buffer is free to reuse when post() returns; results stay in host memory
  // (RoundResult::copy_to).
  Status post(const void* gradient, size_t count, DataType type, CudaStream stream);
  Status post(const void* gradient, size_t count, DataType type);

  // The next round's result if it is complete (nullopt if not yet); the stream's error once
  // every round before the failure has been delivered.
  Result<std::optional<RoundResult>> poll();
  // The next round's result, waiting up to `timeout` (as every timeout: kConfiguredTimeout, the
  // default, is EAGERCOMM_TIMEOUT, twice it with on_failure=continue so that a peer that stops
  // is declared hung and survived first; kWaitForever no limit; communicator.h, "Timeouts"). A
  // timeout only ends the wait: rounds keep running and the object stays usable.
  Result<RoundResult> wait(std::chrono::nanoseconds timeout);
  Result<RoundResult> wait();
  // wait(timeout) that also calls `check` about every 50 ms while it waits, and returns the
  // first error `check` returns (the object lives on, as after a timeout). For callers that
  // must look for signals while they wait (the Python module: Ctrl-C).
  Result<RoundResult> wait(std::chrono::nanoseconds timeout, const std::function<Status()>& check);

  // Collective: drains every carried contribution. Everything any rank posted before its flush()
  // lands in a round no later than the returned one (the flush round), which activates on every
  // rank. Until that round's result, every result goes to `apply` (other ranks may still be
  // finishing their loops: this rank keeps taking part and keeps consuming, so back-pressure
  // cannot stall them). After flush() returns, the results received add up to every post.
  // While a rank flushes it posts no more, so the others' rounds no longer wait for it: quorums
  // count it as arrived and a majority round it would initiate activates on any post.
  Result<uint64_t> flush(const std::function<void(RoundResult&&)>& apply);

  // Stops taking part: rounds in flight fail here, and the peers' rounds from the first one
  // this rank did not finish fail with kPeerFailed. Idempotent; later calls return kAborted.
  void destroy();

  PartialStats stats() const;
  // Every rank's lateness (index: rank) over the rounds this rank has taken; application thread.
  std::vector<RankLateness> lateness() const;
  size_t count() const;
  DataType type() const;
  PartialMode mode() const;
  // This rank's number and the number of ranks in the group the rounds run over now: the
  // communicator's at create(), the survivors' after a failure survived (on_failure=continue).
  int rank() const;
  int size() const;

 private:
  struct Impl;  // collectives/partial/partial_impl.h
  explicit PartialAllreduce(std::unique_ptr<Impl> impl);
  // Results for Impl (RoundResult's constructor is this class's): buffer `buffer` of `owner`, or
  // a copy (data and metadata of a world of `size` ranks).
  static RoundResult result_in(std::shared_ptr<detail::PartialShared> owner, uint32_t buffer,
                               uint64_t round);
  // flush() within the current group: its round, or nullopt when a failure this object
  // continues through moved it to a new group before the round was known and taken.
  Result<std::optional<uint64_t>> flush_in_group(uint64_t number,
                                                 const std::function<void(RoundResult&&)>& apply);
  static RoundResult result_of(std::shared_ptr<const std::vector<uint8_t>> bytes, uint64_t round,
                               int size, size_t count, DataType type);
  std::unique_ptr<Impl> impl_;
};

}  // namespace eagercomm
