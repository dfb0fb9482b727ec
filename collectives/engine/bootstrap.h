// Internal: how a communicator's ranks find each other through the store. Not installed.
//
// Every rank first announces its world size and the settings all ranks must share, compares
// them with rank 0's and waits for every other rank (join), before anything else (transport
// selection included) depends on them: a rank that never comes or was started with another world
// size is reported by name. Then each publishes its endpoints (transport address, small boxes,
// inbox) as one value, rank 0 gathers every rank's into one table that all read (O(P) store
// requests in all), each connects to every peer and waits until every peer has connected
// (connect). Keys live under `scope`.
#pragma once

#include <string>
#include <vector>

#include "collectives/config.h"
#include "runtime/status.h"
#include "runtime/store.h"
#include "transport/mailbox.h"
#include "transport/transport.h"

namespace eagercomm::detail {

class SmallBoxes;

class Bootstrap {
 public:
  Bootstrap(Store& store, const std::string& scope, int rank, int size, const Config& config);

  Store& store() const { return store_; }
  const std::string& scope() const { return scope_; }

  // Announces this rank and waits for all others; checks world sizes and shared settings.
  Status join();
  // Publishes this rank's endpoints, connects `transport` and `mailbox` (and `small`, when not
  // null) to every peer's, and returns once every rank has connected to every peer.
  Status connect(Transport& transport, Mailbox& mailbox, SmallBoxes* small);
  // Tells the ranks waiting for this one that it failed to join (with `why`), so they fail now
  // instead of at the timeout.
  void report_failure(const Status& why);

 private:
  // This rank has published what `prefix` stands for: counts it in, marks it (`prefix`in/<rank>)
  // and waits until every rank has (arrive());
  // fails early when a rank reported a failure to join, and names the missing ranks at the
  // timeout (wait_for_all()).
  Status arrive(const std::string& prefix);
  Status wait_for_all(const std::string& prefix);
  // Waits for `flag_key` as wait_for_all() does (failing early on a rank's reported failure); at
  // the timeout, kTimeout naming `what` (empty: the plain timeout, for the caller to explain).
  Status wait_for_key(const std::string& flag_key, const std::string& what);
  // What a rank publishes for its peers to connect to it.
  struct Endpoints {
    Bytes address;  // Transport::local_address()
    Bytes small;    // SmallBoxes::key(), or empty
    Bytes inbox;    // Mailbox::inbox_key()
  };
  // Publishes `mine` and returns every rank's, by rank.
  Result<std::vector<Endpoints>> exchange(const Endpoints& mine);
  std::string key(const std::string& prefix, int rank) const {
    return prefix_ + prefix + std::to_string(rank);
  }

  Store& store_;
  const std::string scope_;
  const std::string prefix_;  // scope_ + "/"
  const int rank_;
  const int size_;
  const Config& config_;
};

}  // namespace eagercomm::detail
