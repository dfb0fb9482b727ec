#include "collectives/engine/small_boxes.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>

namespace eagercomm::detail {

// Byte offsets inside the region and inside a slot.
struct SmallBoxes::Layout {
  static constexpr size_t kLine = 64;
  static constexpr size_t kControl = kLine;  // bell + sleepers, then the slots
  static constexpr size_t kSeq = 0;
  static constexpr size_t kSig = 8;
  static constexpr size_t kMark = 24;
  static constexpr size_t kPayload = 32;  // the first 32 payload bytes share the sequence line
  static size_t done_offset(size_t max_bytes) {
    return (kPayload + max_bytes + kLine - 1) / kLine * kLine;
  }
  static size_t slot_bytes(size_t max_bytes) { return done_offset(max_bytes) + kLine; }
  static size_t region_bytes(size_t max_bytes, int size) {
    return kControl + static_cast<size_t>(size) * kDepth * slot_bytes(max_bytes);
  }
};

namespace {

struct Control {
  std::atomic<uint32_t> bell;      // the futex word: bumped by each wake-up
  std::atomic<uint32_t> sleepers;  // receivers (threads of the owning rank) about to sleep
};
static_assert(sizeof(Control) <= 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

Control* control(uint8_t* region) { return reinterpret_cast<Control*>(region); }
std::atomic<uint64_t>* word_at(uint8_t* p) { return reinterpret_cast<std::atomic<uint64_t>*>(p); }
const std::atomic<uint64_t>* word_at(const uint8_t* p) {
  return reinterpret_cast<const std::atomic<uint64_t>*>(p);
}

void ring(Control* c) {
  c->bell.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&c->bell), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace

SmallBoxes::SmallBoxes(Transport& transport, size_t max_bytes)
    : transport_(transport),
      max_bytes_(max_bytes),
      slot_bytes_(Layout::slot_bytes(max_bytes)),
      remote_(transport.size()),
      peer_box_(transport.size(), nullptr),
      peer_head_(transport.size(), nullptr),
      stored_(static_cast<size_t>(transport.size()) * kDepth, 0),
      post_queue_(transport.size()),
      post_head_(transport.size(), 0) {}

SmallBoxes::~SmallBoxes() = default;

Result<std::unique_ptr<SmallBoxes>> SmallBoxes::create(Transport& transport, size_t max_bytes) {
  if (max_bytes == 0 || transport.size() > kMaxRanks) {
    return make_status(StatusCode::kInvalidArgument, "small boxes: %zu bytes for %d ranks",
                       max_bytes, transport.size());
  }
  std::unique_ptr<SmallBoxes> boxes(new SmallBoxes(transport, max_bytes));
  EC_ASSIGN_OR_RETURN(
      boxes->region_,
      transport.allocate(Layout::region_bytes(max_bytes, transport.size()), MemoryKind::kHost));
  return boxes;
}

Status SmallBoxes::connect_peer(int peer, std::span<const uint8_t> key) {
  EC_ASSIGN_OR_RETURN(remote_[peer], transport_.import_region(peer, key));
  const size_t need = Layout::region_bytes(max_bytes_, transport_.size());
  if (remote_[peer]->size() != need) {
    return make_status(StatusCode::kMismatch,
                       "small-collective boxes: rank %d's region has %zu bytes, this rank expects "
                       "%zu (do the ranks use the same EAGERCOMM_SMALL_MAX_BYTES?)",
                       peer, remote_[peer]->size(), need);
  }
  auto* base = static_cast<uint8_t*>(transport_.mapped_address(*remote_[peer]));
  if (base == nullptr) {
    return make_status(StatusCode::kNotSupported,
                       "small-collective boxes: transport %s cannot map rank %d's region",
                       std::string(transport_.name()).c_str(), peer);
  }
  peer_head_[peer] = base;
  peer_box_[peer] =
      base + Layout::kControl + static_cast<size_t>(transport_.rank()) * kDepth * slot_bytes_;
  return Status::Ok();
}

void SmallBoxes::enqueue(int peer, uint64_t seq) { post_queue_[peer].push_back(seq); }

void SmallBoxes::dequeue(int peer, uint64_t seq) {
  std::vector<uint64_t>& q = post_queue_[peer];
  const auto it =
      std::find(q.begin() + static_cast<std::ptrdiff_t>(post_head_[peer]), q.end(), seq);
  if (it != q.end()) q.erase(it);
  if (post_head_[peer] == q.size()) {
    q.clear();
    post_head_[peer] = 0;
  }
}

bool SmallBoxes::try_post(int peer, uint64_t seq, const OpSignature& sig, const void* data,
                          size_t bytes, uint32_t mark) {
  std::vector<uint64_t>& q = post_queue_[peer];
  size_t& head = post_head_[peer];
  if (head == q.size() || q[head] != seq) return false;  // an earlier call posts first
  const size_t k = seq % kDepth;
  uint8_t* slot = peer_box_[peer] + k * slot_bytes_;
  uint64_t& stored = stored_[static_cast<size_t>(peer) * kDepth + k];
  if (word_at(slot + Layout::done_offset(max_bytes_))->load(std::memory_order_acquire) < stored) {
    return false;
  }
  if (bytes) std::memcpy(slot + Layout::kPayload, data, bytes);
  std::memcpy(slot + Layout::kSig, &sig, sizeof(sig));
  std::memcpy(slot + Layout::kMark, &mark, sizeof(mark));
  word_at(slot + Layout::kSeq)->store(seq + 1, std::memory_order_release);
  stored = seq + 1;
  if (++head == q.size()) {  // the usual case: nothing else queued, no allocation next time
    q.clear();
    head = 0;
  }
  return true;
}

void SmallBoxes::wake_if_sleeping(int peer) {
  Control* c = control(peer_head_[peer]);
  if (c->sleepers.load(std::memory_order_relaxed) != 0) ring(c);
}

Result<bool> SmallBoxes::peek(int sender, uint64_t seq, OpSignature* sig, const uint8_t** payload) {
  const size_t k = seq % kDepth;
  uint8_t* slot = own_slot(sender, k);
  const uint64_t word = word_at(slot + Layout::kSeq)->load(std::memory_order_acquire);
  if (word == seq + 1) {
    std::memcpy(sig, slot + Layout::kSig, sizeof(*sig));
    *payload = slot + Layout::kPayload;
    return true;
  }
  if (word > seq + 1) {
    return make_status(StatusCode::kProtocolError,
                       "small collective #%llu: rank %d's box holds call #%llu, which it cannot "
                       "have sent yet",
                       static_cast<unsigned long long>(seq), sender,
                       static_cast<unsigned long long>(word - 1));
  }
  if (word != 0 && std::find(calls_.begin(), calls_.end(), word - 1) == calls_.end()) {
    std::atomic<uint64_t>* done = word_at(slot + Layout::done_offset(max_bytes_));
    if (done->load(std::memory_order_relaxed) < word) done->store(word, std::memory_order_release);
  }
  return false;
}

bool SmallBoxes::arrived(int sender, uint64_t seq, uint32_t* mark) const {
  const uint8_t* slot = own_slot(sender, seq % kDepth);
  if (word_at(slot + Layout::kSeq)->load(std::memory_order_acquire) != seq + 1) return false;
  if (mark) std::memcpy(mark, slot + Layout::kMark, sizeof(*mark));
  return true;
}

uint8_t* SmallBoxes::own_slot(int sender, size_t k) const {
  return static_cast<uint8_t*>(region_->data()) + Layout::kControl +
         (static_cast<size_t>(sender) * kDepth + k) * slot_bytes_;
}

void SmallBoxes::consume(int sender, uint64_t seq) {
  uint8_t* slot = own_slot(sender, seq % kDepth);
  word_at(slot + Layout::done_offset(max_bytes_))->store(seq + 1, std::memory_order_release);
}

void SmallBoxes::end_call(uint64_t seq) {
  const auto it = std::find(calls_.begin(), calls_.end(), seq);
  if (it != calls_.end()) calls_.erase(it);
}

uint32_t SmallBoxes::announce_sleep() {
  Control* c = control(static_cast<uint8_t*>(region_->data()));
  const uint32_t ticket = c->bell.load(std::memory_order_acquire);
  c->sleepers.fetch_add(1, std::memory_order_seq_cst);
  return ticket;
}

void SmallBoxes::commit_sleep(uint32_t ticket, std::chrono::nanoseconds timeout) {
  Control* c = control(static_cast<uint8_t*>(region_->data()));
  const auto t = std::max(std::chrono::nanoseconds(0), std::min(timeout, kMaxSleep));
  timespec ts{static_cast<time_t>(t.count() / 1000000000),
              static_cast<long>(t.count() % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&c->bell), FUTEX_WAIT, ticket, &ts, nullptr, 0);
}

void SmallBoxes::end_sleep() {
  control(static_cast<uint8_t*>(region_->data()))->sleepers.fetch_sub(1, std::memory_order_release);
}

void SmallBoxes::wake_self() {
  Control* c = control(static_cast<uint8_t*>(region_->data()));
  // A read-modify-write, like announce_sleep()'s: a sleeper either is seen here or sees the
  // caller's earlier stores (a submission) in its re-check.
  if (c->sleepers.fetch_add(0, std::memory_order_seq_cst) != 0) ring(c);
}

}  // namespace eagercomm::detail
