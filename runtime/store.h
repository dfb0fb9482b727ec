// The bootstrap key-value store: how ranks find each other before any transport is connected.
//
// The shape of c10d::Store and Gloo's rendezvous store (set / get / wait / add), so embedding
// in those frameworks is cheap. Values are opaque bytes. get() and wait() block until the keys
// exist or the timeout passes; a timeout error names the keys still missing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value`, replacing any previous value, and wakes the waiters of `key`.
  virtual Status set(const std::string& key, const Bytes& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set.
  virtual Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) = 0;
  // Adds `delta` to the integer stored at `key` (absent: 0) and returns the new value.
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
  // Waits until every key in `keys` is set.
  virtual Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) = 0;
};

// A store in this process's memory, for ranks that are threads of one process (tests, the
// in-process world). Thread-safe. Bootstrap is not a data path, so a mutex is fine here.
class HashStore final : public Store {
 public:
  Status set(const std::string& key, const Bytes& value) override;
  Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

// A store's timeouts keep c10d::Store's meaning, the shape these stores share: 0 (c10d's
// kNoTimeout), -1 and kWaitForever wait without limit, since a store has no configured timeout
// for 0 to stand for (communicator.h's rule, where 0 is EAGERCOMM_TIMEOUT); any other negative
// value is refused with kInvalidArgument by every store here. A timeout too long for the clock
// is no limit. The check the stores share:
Status check_store_timeout(std::chrono::nanoseconds timeout);

// Helpers for small typed values in a store.
Bytes to_bytes(const std::string& s);
std::string to_string(const Bytes& b);

}  // namespace eagercomm
