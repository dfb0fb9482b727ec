#include "collectives/engine/bootstrap.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "collectives/engine/small_boxes.h"
#include "runtime/clock.h"
#include "runtime/deadline.h"

namespace eagercomm::detail {

Bootstrap::Bootstrap(Store& store, const std::string& scope, int rank, int size,
                     const Config& config)
    : store_(store),
      scope_(scope),
      prefix_(scope + "/"),
      rank_(rank),
      size_(size),
      config_(config) {}

void Bootstrap::report_failure(const Status& why) {
  (void)store_.set(key("failed/", rank_), to_bytes(why.to_string()));
  (void)store_.add(prefix_ + "failed", 1);
}

// Store traffic: every rank sets its own keys and compares with rank 0's (O(1) requests per
// rank, O(P) in all); the waits for everybody are a counter and one flag (arrive()), not a
// look at every rank's key by every rank (P^2 requests, minutes at P = 4096 on one store).
Status Bootstrap::join() {
  // Settings every rank must share, published before the size: once a rank's size is there,
  // so are they.
  const std::string small = std::to_string(config_.small_max_bytes);
  EC_RETURN_IF_ERROR(store_.set(key("smallmax/", rank_), to_bytes(small)));
  EC_RETURN_IF_ERROR(store_.set(key("size/", rank_), to_bytes(std::to_string(size_))));
  // Rank 0 exists in every world, and every rank compares with it: a rank that differs reports
  // it (report_failure(), by its caller), and the others, waiting for it below, fail with its
  // report at once instead of waiting for ranks that will never come.
  if (rank_ != 0) {
    EC_ASSIGN_OR_RETURN(Bytes size0, store_.get(key("size/", 0), config_.timeout));
    if (to_string(size0) != std::to_string(size_)) {
      return make_status(StatusCode::kMismatch,
                         "bootstrap: rank %d was started with world size %d, rank 0 with %s", rank_,
                         size_, to_string(size0).c_str());
    }
    EC_ASSIGN_OR_RETURN(Bytes small0, store_.get(key("smallmax/", 0), config_.timeout));
    if (to_string(small0) != small) {
      return make_status(StatusCode::kMismatch,
                         "bootstrap: rank %d has EAGERCOMM_SMALL_MAX_BYTES=%s, rank 0 has %s (it "
                         "must be the same on every rank)",
                         rank_, small.c_str(), to_string(small0).c_str());
    }
  }
  return arrive("size/");
}

Status Bootstrap::arrive(const std::string& prefix) {
  // The counter tells the last rank to arrive, which raises the flag everybody waits for. The
  // marker, set after the count, names the missing ranks at a timeout: a rank killed between its
  // published key and its count is missing, not present (the key alone would say it arrived).
  EC_ASSIGN_OR_RETURN(const int64_t arrived, store_.add(prefix_ + prefix + "count", 1));
  EC_RETURN_IF_ERROR(store_.set(key(prefix + "in/", rank_), to_bytes("1")));
  if (arrived == size_) EC_RETURN_IF_ERROR(store_.set(prefix_ + prefix + "all", to_bytes("1")));
  if (arrived > size_) {
    return make_status(StatusCode::kMismatch,
                       "bootstrap: %lld ranks arrived at '%s' of a world of %d (two jobs share "
                       "the store scope '%s'?)",
                       static_cast<long long>(arrived), prefix.c_str(), size_, scope_.c_str());
  }
  return wait_for_all(prefix);
}

Status Bootstrap::wait_for_all(const std::string& prefix) {
  const Status waited = wait_for_key(prefix_ + prefix + "all", "");
  if (waited.code() != StatusCode::kTimeout) return waited;
  // Only now, at the timeout, one look per rank: who never came.
  std::string missing;
  for (int peer = 0; peer < size_; ++peer) {
    if (store_.get(key(prefix + "in/", peer), std::chrono::milliseconds(1)).ok()) continue;
    missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
  }
  if (missing.empty()) {
    // Everybody arrived and marked it, but the last to arrive, whose count raises the flag,
    // did not raise it: it died between its marker and the flag (seen in faults_test's
    // kill-bootstrap, with an empty list of missing ranks). Raise it for it and go on; the next
    // step names the dead rank, which will not arrive there.
    EC_RETURN_IF_ERROR(store_.set(prefix_ + prefix + "all", to_bytes("1")));
    return Status::Ok();
  }
  return make_status(StatusCode::kTimeout,
                     "bootstrap: rank %d waited %s for ranks that never joined: %s", rank_,
                     format_duration(config_.timeout).c_str(), missing.c_str());
}

Status Bootstrap::wait_for_key(const std::string& flag_key, const std::string& what) {
  const std::vector<std::string> flag{flag_key};
  // Wait in slices, looking between them for ranks that reported a failure to join.
  const auto deadline = deadline_after(config_.timeout);
  Status waited;
  for (;;) {
    waited = store_.wait(flag, std::chrono::milliseconds(50));
    if (waited.code() != StatusCode::kTimeout) break;
    if (store_.get(prefix_ + "failed", std::chrono::milliseconds(1)).ok()) {
      for (int peer = 0; peer < size_; ++peer) {
        auto why = store_.get(key("failed/", peer), std::chrono::milliseconds(1));
        if (!why.ok()) continue;
        // A rank that differs from the others says how; that is this rank's error too.
        const std::string text = to_string(why.value());
        const std::string mismatch = std::string(status_code_name(StatusCode::kMismatch)) + ": ";
        if (text.starts_with(mismatch)) {
          return Status(StatusCode::kMismatch, text.substr(mismatch.size()));
        }
        return make_status(StatusCode::kPeerFailed, "bootstrap: rank %d failed to join: %s", peer,
                           text.c_str());
      }
    }
    if (RuntimeClock::now() >= deadline) break;
  }
  if (waited.ok() || waited.code() != StatusCode::kTimeout || what.empty()) return waited;
  return make_status(StatusCode::kTimeout, "bootstrap: rank %d waited %s for %s", rank_,
                     format_duration(config_.timeout).c_str(), what.c_str());
}

namespace {

// A rank's endpoints as one store value, and every rank's as one table: fields and records are
// length-prefixed (u32, host order: one job, one architecture).
void append_field(Bytes* out, const Bytes& field) {
  const uint32_t n = static_cast<uint32_t>(field.size());
  const auto* p = reinterpret_cast<const uint8_t*>(&n);
  out->insert(out->end(), p, p + sizeof(n));
  out->insert(out->end(), field.begin(), field.end());
}

// Reads the field at *at; false when the bytes end first.
bool read_field(const Bytes& in, size_t* at, Bytes* field) {
  uint32_t n = 0;
  if (in.size() - *at < sizeof(n)) return false;
  std::memcpy(&n, in.data() + *at, sizeof(n));
  *at += sizeof(n);
  if (in.size() - *at < n) return false;
  field->assign(in.begin() + static_cast<std::ptrdiff_t>(*at),
                in.begin() + static_cast<std::ptrdiff_t>(*at + n));
  *at += n;
  return true;
}

}  // namespace

Result<std::vector<Bootstrap::Endpoints>> Bootstrap::exchange(const Endpoints& mine) {
  // One value per rank, one count and flag to know they are all there, then rank 0 gathers them
  // into one table that everybody reads: O(P) store requests in all, where reading every peer's
  // keys was 2 P (P - 1).
  Bytes record;
  append_field(&record, mine.address);
  append_field(&record, mine.small);
  append_field(&record, mine.inbox);
  EC_RETURN_IF_ERROR(store_.set(key("peer/", rank_), record));
  EC_RETURN_IF_ERROR(arrive("peer/"));
  const std::string table_key = prefix_ + "peers";
  Bytes table;
  if (rank_ == 0) {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == 0) {
        append_field(&table, record);
        continue;
      }
      EC_ASSIGN_OR_RETURN(Bytes one, store_.get(key("peer/", peer), config_.timeout));
      append_field(&table, one);
    }
    EC_RETURN_IF_ERROR(store_.set(table_key, table));
  } else {
    EC_RETURN_IF_ERROR(wait_for_key(table_key, "rank 0's table of every rank's endpoints"));
    EC_ASSIGN_OR_RETURN(table, store_.get(table_key, config_.timeout));
  }
  std::vector<Endpoints> all(size_);
  size_t at = 0;
  for (int peer = 0; peer < size_; ++peer) {
    Bytes one;
    size_t in = 0;
    if (!read_field(table, &at, &one) || !read_field(one, &in, &all[peer].address) ||
        !read_field(one, &in, &all[peer].small) || !read_field(one, &in, &all[peer].inbox) ||
        in != one.size()) {
      return make_status(StatusCode::kProtocolError,
                         "bootstrap: the table of endpoints (%zu bytes) is malformed at rank %d's "
                         "record (scope '%s')",
                         table.size(), peer, scope_.c_str());
    }
  }
  if (at != table.size()) {
    return make_status(StatusCode::kProtocolError,
                       "bootstrap: the table of endpoints holds more than %d ranks (scope '%s')",
                       size_, scope_.c_str());
  }
  return all;
}

Status Bootstrap::connect(Transport& transport, Mailbox& mailbox, SmallBoxes* small) {
  Endpoints mine;
  mine.address = transport.local_address();
  if (small) mine.small = small->key();
  mine.inbox = mailbox.inbox_key();
  EC_ASSIGN_OR_RETURN(std::vector<Endpoints> all, exchange(mine));
  // A transport that connects on demand only records the addresses here, and the mailbox
  // imports an inbox when it first sends there: a rank connects to the peers it talks to
  // (issue 21), which the algorithms keep to O(log P).
  const bool on_demand = transport.capabilities().connects_on_demand;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    EC_RETURN_IF_ERROR(transport.connect(peer, all[peer].address));
    if (on_demand) {
      EC_RETURN_IF_ERROR(mailbox.know_peer(peer, all[peer].inbox));
    } else {
      EC_RETURN_IF_ERROR(mailbox.connect_peer(peer, all[peer].inbox));
    }
  }
  // Nobody sends before every rank has connected to every peer: a verbs queue pair drops what
  // arrives before it is ready to receive (RTR), and the sender's retries run out in about half
  // a second, so a healthy but slower rank would be reported lost (issue 18, defect 2; perftest
  // and NCCL handshake once more after RTR for the same reason).
  EC_RETURN_IF_ERROR(arrive("connected/"));
  if (!small) return Status::Ok();
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    EC_RETURN_IF_ERROR(small->connect_peer(peer, all[peer].small));
  }
  return Status::Ok();
}

}  // namespace eagercomm::detail
