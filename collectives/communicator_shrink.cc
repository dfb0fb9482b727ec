// Communicator::shrink(): the survivors of a failure agree on one membership through the
// bootstrap store and rebuild the communicator over it (docs/RELIABILITY.md, "Shrinking").
//
// Agreement. The store is the one party every survivor can reach whatever died, so it decides:
// under "<scope>/shrink<n>/" (n: this rank's count of shrink() calls, the same on every survivor
// that made the same calls; a call after a failed one agrees afresh) every caller publishes the
// peers it knows to be gone ("view/<rank>", then raises "joined/<rank>"), and the first caller to
// take the ticket ("decider") waits until every rank that no view calls gone has published its own,
// merging the views as they come; at the timeout the ranks still silent are left out. It
// publishes the members ("members": the ranks that published a view); every caller reads that
// one list, so all decide the same whatever each had seen.
// The members then bootstrap a new engine under "<scope>/shrink<n>/comm" (new transport
// endpoints, new mailboxes: a failed peer may have left the old ones in any state).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collective_log.h"
#include "collectives/communicator.h"
#include "collectives/communicator_impl.h"
#include "collectives/device/device_collectives.h"
#include "collectives/engine/comm_core.h"
#include "runtime/clock.h"
#include "runtime/deadline.h"

namespace eagercomm {
namespace {

// What a view and the members key hold: ranks, and the engine's next stream id (the decider
// publishes the largest, so objects created after the shrink get the same id on every member
// even where a create() that met the failure took one).
struct RankList {
  uint32_t next_stream = 0;
  std::vector<int> ranks;
};

Bytes encode_ranks(const RankList& list) {
  Bytes out((1 + list.ranks.size()) * sizeof(int32_t));
  std::memcpy(out.data(), &list.next_stream, sizeof(uint32_t));
  for (size_t i = 0; i < list.ranks.size(); ++i) {
    const int32_t r = list.ranks[i];
    std::memcpy(out.data() + (i + 1) * sizeof(int32_t), &r, sizeof(r));
  }
  return out;
}

Result<RankList> decode_ranks(const Bytes& bytes, int size, const std::string& key) {
  if (bytes.empty() || bytes.size() % sizeof(int32_t) != 0) {
    return make_status(StatusCode::kInternal,
                       "shrink: store key %s holds %zu bytes (a stream counter and 4 per rank "
                       "expected)",
                       key.c_str(), bytes.size());
  }
  RankList list;
  std::memcpy(&list.next_stream, bytes.data(), sizeof(uint32_t));
  list.ranks.resize(bytes.size() / sizeof(int32_t) - 1);
  for (size_t i = 0; i < list.ranks.size(); ++i) {
    int32_t r = 0;
    std::memcpy(&r, bytes.data() + (i + 1) * sizeof(int32_t), sizeof(r));
    if (r < 0 || r >= size) {
      return make_status(StatusCode::kInternal, "shrink: store key %s names rank %d of %d",
                         key.c_str(), static_cast<int>(r), size);
    }
    list.ranks[i] = r;
  }
  return list;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text.empty() ? "none" : text;
}

// The decider: the members are the ranks that published a view. It waits for every rank that no
// view calls gone, until `deadline`, then looks once more for the ones called gone: a rank that
// left the old group by shrinking published its view before its exit notice went out.
// Meanwhile its old engine still takes in what peers send (exit notices, verdicts): the failure
// that brought this rank here may have come before the news of who failed.
Result<std::vector<int>> decide_members(Store& store, const std::string& prefix, int rank, int size,
                                        detail::CommCore& old,
                                        std::chrono::steady_clock::time_point deadline,
                                        uint32_t* next_stream) {
  std::vector<bool> out(size, false), seen(size, false);
  seen[rank] = true;
  // Whether rank r has published: add(.., 0) answers at once on every store, where a get() with
  // a short timeout may not (a c10d store's timed-out wait can leave its connection out of step).
  auto look = [&](int r) -> Result<bool> {
    EC_ASSIGN_OR_RETURN(int64_t joined, store.add(prefix + "joined/" + std::to_string(r), 0));
    if (joined == 0) return false;
    const std::string key = prefix + "view/" + std::to_string(r);
    EC_ASSIGN_OR_RETURN(Bytes view, store.get(key, std::chrono::seconds(30)));
    seen[r] = true;
    EC_ASSIGN_OR_RETURN(RankList theirs, decode_ranks(view, size, key));
    *next_stream = std::max(*next_stream, theirs.next_stream);
    for (int g : theirs.ranks) out[g] = true;
    return true;
  };
  for (;;) {
    old.engine().try_progress();
    for (int g : old.gone_peers()) out[g] = true;
    bool waiting = false;
    for (int r = 0; r < size; ++r) {
      if (out[r] || seen[r]) continue;
      EC_ASSIGN_OR_RETURN(bool found, look(r));
      waiting |= !found;
    }
    if (!waiting) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (RuntimeClock::now() >= deadline) {
      std::vector<int> silent;
      for (int r = 0; r < size; ++r) {
        if (!out[r] && !seen[r]) silent.push_back(r);
      }
      EC_WARN(kColl, "shrink: ranks %s did not join within the timeout; they are left out",
              rank_list(silent).c_str());
      break;
    }
  }
  // The ranks called gone that did publish (their exit notice came from their own shrink).
  for (int r = 0; r < size; ++r) {
    if (!seen[r]) EC_RETURN_IF_ERROR(look(r).status());
  }
  std::vector<int> members;
  for (int r = 0; r < size; ++r) {
    if (seen[r]) members.push_back(r);
  }
  return members;
}

}  // namespace

uint32_t Communicator::generation() const { return impl_->generation; }

std::vector<int> Communicator::former_ranks() const {
  if (impl_->generation > 0) return impl_->members;
  std::vector<int> ranks(static_cast<size_t>(size()));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int>(r);
  return ranks;
}

Result<std::vector<int>> Communicator::shrink(std::chrono::nanoseconds timeout) {
  Impl& im = *impl_;
  std::shared_ptr<detail::CommCore> old;
  {
    std::lock_guard lock(im.abort_mu);
    if (im.aborted) {
      return make_status(StatusCode::kAborted, "shrink(): the communicator was aborted%s%s",
                         im.aborted->empty() ? "" : ": ", im.aborted->c_str());
    }
    old = im.core;
  }
  log_set_thread_rank(old->rank());
  EC_ASSIGN_OR_RETURN(timeout, detail::check_timeout(timeout, "shrink"));
  timeout = old->resolve(timeout);
  if (im.bootstrap == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "shrink(): this communicator has no bootstrap store to rebuild through");
  }
  const int rank = old->rank();
  const int size = old->size();
  const std::string prefix = im.scope + "/shrink" + std::to_string(++im.shrink_calls) + "/";
  const auto deadline = deadline_after(timeout);
  const std::chrono::nanoseconds store_timeout =
      timeout < std::chrono::nanoseconds::zero() ? kWaitForever : timeout;

  // The view goes out before the old group stops here: peers that have not seen the failure yet
  // learn of this rank's exit and come here too, and a peer that takes that exit for a death has
  // this rank's view in the store already (the decider counts every rank that published one).
  const RankList view{old->next_stream_id(), old->gone_peers()};
  Store& store = *im.bootstrap;
  EC_RETURN_IF_ERROR(store.set(prefix + "view/" + std::to_string(rank), encode_ranks(view)));
  EC_RETURN_IF_ERROR(store.add(prefix + "joined/" + std::to_string(rank), 1).status());
  EC_ASSIGN_OR_RETURN(int64_t ticket, store.add(prefix + "decider", 1));
  if (ticket != 1) {
    old->destroy();
  } else {
    // The decider stops its old group once it has published (stopping may take the drain of
    // buffers lent to peers, which the others need not wait for).
    uint32_t next_stream = view.next_stream;
    Result<std::vector<int>> decided =
        decide_members(store, prefix, rank, size, *old, deadline, &next_stream);
    const Status published =
        decided.ok() ? store.set(prefix + "members", encode_ranks({next_stream, decided.value()}))
                     : decided.status();
    old->destroy();
    EC_RETURN_IF_ERROR(published);
  }
  // The decider may take the whole timeout to wait for late ranks before it publishes.
  const std::chrono::nanoseconds members_timeout =
      store_timeout == kWaitForever || store_timeout > kWaitForever / 4 ? kWaitForever
                                                                        : 2 * store_timeout;
  Result<Bytes> got = store.get(prefix + "members", members_timeout);
  if (!got.ok()) {
    return make_status(got.status().code(),
                       "shrink: rank %d found no members published under %s (the rank that "
                       "decides, the first to join, may have died before publishing); calling "
                       "shrink() again agrees afresh: %s",
                       rank, prefix.c_str(), got.status().message().c_str());
  }
  const Bytes& packed = got.value();
  EC_ASSIGN_OR_RETURN(RankList decided, decode_ranks(packed, size, prefix + "members"));
  const std::vector<int>& members = decided.ranks;
  const auto me = std::find(members.begin(), members.end(), rank);
  if (me == members.end()) {
    return make_status(StatusCode::kPeerFailed,
                       "shrink: rank %d was left out of the new group (members: ranks %s of %d): "
                       "it was reported gone or did not join in time",
                       rank, rank_list(members).c_str(), size);
  }
  const int new_rank = static_cast<int>(me - members.begin());
  const int new_size = static_cast<int>(members.size());
  std::vector<int> left;
  for (int r = 0; r < size; ++r) {
    if (!std::binary_search(members.begin(), members.end(), r)) left.push_back(r);
  }
  EC_INFO(kColl, "shrink: ranks %s left; rank %d of %d is now rank %d of %d",
          rank_list(left).c_str(), rank, size, new_rank, new_size);

  // A member that dies now fails the bootstrap below after the timeout, naming it; the
  // communicator stays as it was (its engine stopped), and calling shrink() again agrees afresh.
  Config config = old->config();
  EC_ASSIGN_OR_RETURN(
      std::shared_ptr<detail::CommCore> fresh,
      detail::CommCore::create(store, prefix + "comm", new_rank, new_size, config, im.in_process));
  fresh->reserve_stream_ids(decided.next_stream);
  ++im.generation;
  im.shrink_prefix = prefix;
  im.members = members;
  {
    std::lock_guard lock(im.device_mu);
    im.device.reset();  // staged on the old engine's stream and buffers
  }
  im.spare_small.reset();
  std::optional<std::string> aborted;
  {
    std::lock_guard lock(im.abort_mu);
    aborted = im.aborted;
    im.core = fresh;
  }
  log_set_thread_rank(new_rank);
  if (aborted) {  // while this shrink ran: the new group goes the way the old one went
    fresh->abort(*aborted);
    return make_status(StatusCode::kAborted,
                       "shrink(): the communicator was aborted while it shrank%s%s",
                       aborted->empty() ? "" : ": ", aborted->c_str());
  }
  return members;
}

}  // namespace eagercomm
