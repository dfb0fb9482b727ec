#include "runtime/store.h"

#include <cstring>

#include "runtime/deadline.h"

namespace eagercomm {

Status HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
  return Status::Ok();
}

Result<Bytes> HashStore::get(const std::string& key, std::chrono::nanoseconds timeout) {
  EC_RETURN_IF_ERROR(wait({key}, timeout));
  std::lock_guard<std::mutex> lock(mu_);
  return data_.at(key);
}

Result<int64_t> HashStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Bytes& b = data_[key];
    if (b.size() == sizeof(int64_t))
      std::memcpy(&value, b.data(), sizeof(value));
    else if (!b.empty()) {
      return make_status(StatusCode::kInvalidArgument, "store key '%s' does not hold a counter",
                         key.c_str());
    }
    value += delta;
    b.resize(sizeof(value));
    std::memcpy(b.data(), &value, sizeof(value));
  }
  cv_.notify_all();
  return value;
}

Status check_store_timeout(std::chrono::nanoseconds timeout) {
  if (timeout >= std::chrono::nanoseconds::zero() || timeout == std::chrono::nanoseconds(-1)) {
    return Status::Ok();
  }
  return make_status(StatusCode::kInvalidArgument,
                     "store: timeout %lldns is negative (0, -1 or kWaitForever: no limit)",
                     static_cast<long long>(timeout.count()));
}

Status HashStore::wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) {
  EC_RETURN_IF_ERROR(check_store_timeout(timeout));
  const auto deadline = deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (data_.find(k) == data_.end()) return false;
    }
    return true;
  };
  if (is_forever(deadline)) {
    cv_.wait(lock, all_present);
    return Status::Ok();
  }
  if (cv_.wait_until(lock, deadline, all_present)) return Status::Ok();
  std::string missing;
  for (const auto& k : keys) {
    if (data_.find(k) != data_.end()) continue;
    if (!missing.empty()) missing += ", ";
    missing += k;
  }
  return make_status(StatusCode::kTimeout, "store: keys not set within the timeout: %s",
                     missing.c_str());
}

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace eagercomm
