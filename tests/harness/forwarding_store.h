// A store that forwards every call to an in-memory one: tests derive from it to change what one
// kind of call does (lose a key, cut a value) and leave the rest as they are.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/store.h"

namespace eagercomm::test {

class ForwardingStore : public Store {
 public:
  Status set(const std::string& key, const Bytes& value) override { return inner_.set(key, value); }
  Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) override {
    return inner_.get(key, timeout);
  }
  Result<int64_t> add(const std::string& key, int64_t delta) override {
    return inner_.add(key, delta);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) override {
    return inner_.wait(keys, timeout);
  }

 protected:
  HashStore inner_;
};

}  // namespace eagercomm::test
