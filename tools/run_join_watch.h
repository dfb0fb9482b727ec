// Which ranks of a job have joined it, as eagercomm-run sees in the job's store (it serves the
// store itself, so it can ask it).
//
// Communicator::from_env() publishes `eagercomm/<job>/size/<rank>` when a rank begins to join
// and `eagercomm/<job>/peer/<rank>` (its endpoints, one value) once it has published everything
// its peers need (collectives/engine/bootstrap.cc): a rank without that key has not joined, and its
// peers wait for it. A rank that fails to join writes `.../failed/<rank>` and bumps the
// `.../failed` counter, which waiting peers look at every 50 ms; report_gone() writes the same for
// a rank that left without joining, so they stop waiting at once and name it.
//
// Only from_env()'s default scope is watched: a program that passes its own
// CommunicatorOptions::scope is never seen joining. Each question is one request to the store;
// a key that is not there costs a 1 ms wait and its cancel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/status.h"
#include "runtime/tcp_store.h"

namespace eagercomm::run {

class JoinWatch {
 public:
  static Result<std::unique_ptr<JoinWatch>> connect(uint16_t port, const std::string& token,
                                                    const std::string& job_id);
  // The rank began to join (its size key is there).
  bool began(int rank) { return has("size/" + std::to_string(rank)); }
  // The rank has joined (its endpoints key is there).
  bool joined(int rank) { return has("peer/" + std::to_string(rank)); }
  // Tells the ranks waiting for `rank` that it is gone, `why`.
  void report_gone(int rank, const std::string& why);
  // "eagercomm/<job>" (for messages).
  const std::string& scope() const { return scope_; }

 private:
  JoinWatch(std::unique_ptr<TcpStore> store, std::string scope)
      : store_(std::move(store)), scope_(std::move(scope)) {}
  bool has(const std::string& key);

  std::unique_ptr<TcpStore> store_;
  std::string scope_;
};

}  // namespace eagercomm::run
