// eagercomm's bootstrap Store over a c10d::Store: lets a communicator rendezvous through the store
// torch.distributed.init_process_group already set up (TCPStore, FileStore, ...), so the
// eagercomm backend needs no port or launcher of its own.
//
// Keys are prefixed (the c10d store given to a backend is already scoped to its process group;
// the prefix keeps ours apart from torch's own keys in that scope). c10d reports timeouts and
// connection failures as exceptions; they become kTimeout / kIoError statuses that name the key.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/store.h"

namespace eagercomm::torchext {

class C10dStoreAdapter final : public Store {
 public:
  C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store, std::string prefix);

  Status set(const std::string& key, const Bytes& value) override;
  // A timeout of 0 or less waits as long as the c10d store's own timeout allows.
  Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }
  std::chrono::milliseconds limit(std::chrono::nanoseconds timeout) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
};

}  // namespace eagercomm::torchext
