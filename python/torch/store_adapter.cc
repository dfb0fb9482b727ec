#include "python/torch/store_adapter.h"

#include <exception>
#include <utility>

namespace eagercomm::torchext {
namespace {

// c10d has no exception type for timeouts (TCPStore throws c10::Error "Socket Timeout",
// FileStore and HashStore "Timeout waiting for key" / "Wait timeout"): recognise the words.
Status from_exception(const std::exception& e, const std::string& what,
                      std::chrono::milliseconds limit) {
  std::string msg = e.what();
  // c10::Error appends a C++ backtrace after the first line; the first line is the message.
  if (size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  const bool timeout =
      msg.find("imeout") != std::string::npos || msg.find("timed out") != std::string::npos;
  if (timeout) {
    return make_status(StatusCode::kTimeout, "c10d store: %s not set within %lld ms (%s)",
                       what.c_str(), static_cast<long long>(limit.count()), msg.c_str());
  }
  return make_status(StatusCode::kIoError, "c10d store: %s: %s", what.c_str(), msg.c_str());
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    out += "'" + keys[i] + "'";
  }
  return out;
}

}  // namespace

C10dStoreAdapter::C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store, std::string prefix)
    : store_(std::move(store)), prefix_(std::move(prefix)) {}

std::chrono::milliseconds C10dStoreAdapter::limit(std::chrono::nanoseconds timeout) const {
  if (timeout.count() <= 0) return store_->getTimeout();
  // Round up: a 0.5 ms limit must not become "no limit".
  return std::chrono::ceil<std::chrono::milliseconds>(timeout);
}

Status C10dStoreAdapter::set(const std::string& key, const Bytes& value) {
  try {
    store_->set(full(key), value);
    return Status::Ok();
  } catch (const std::exception& e) {
    return from_exception(e, "setting key '" + key + "'", store_->getTimeout());
  }
}

Result<Bytes> C10dStoreAdapter::get(const std::string& key, std::chrono::nanoseconds timeout) {
  const std::chrono::milliseconds ms = limit(timeout);
  try {
    // c10d's get() waits with the store's own timeout; wait first so ours is the one in force.
    store_->wait({full(key)}, ms);
    return store_->get(full(key));
  } catch (const std::exception& e) {
    return from_exception(e, "key '" + key + "'", ms);
  }
}

Result<int64_t> C10dStoreAdapter::add(const std::string& key, int64_t delta) {
  try {
    return store_->add(full(key), delta);
  } catch (const std::exception& e) {
    return from_exception(e, "adding to key '" + key + "'", store_->getTimeout());
  }
}

Status C10dStoreAdapter::wait(const std::vector<std::string>& keys,
                              std::chrono::nanoseconds timeout) {
  const std::chrono::milliseconds ms = limit(timeout);
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const std::string& k : keys) prefixed.push_back(full(k));
  try {
    store_->wait(prefixed, ms);
    return Status::Ok();
  } catch (const std::exception& e) {
    return from_exception(e, quote_keys(keys), ms);
  }
}

}  // namespace eagercomm::torchext
