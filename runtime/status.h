// Status and Result<T>: the error model of every eagercomm call.
//
// Hot paths return a Status (or a Result<T> carrying a value or a Status) instead of throwing.
// kOk and kInProgress are not errors; every other code is. The first place that sees an error
// logs it with its cause and builds the Status; callers only propagate it (UCX's rule).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace eagercomm {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInProgress,       // not an error: the operation has not finished yet
  kInvalidArgument,  // the caller passed something wrong (null buffer, bad count, bad name)
  kMismatch,         // ranks disagree on a collective's arguments (count, type, op, root)
  kTimeout,          // a blocking call ran past its deadline
  kPeerFailed,       // a peer is gone: destroyed, dead, or unreachable
  kAborted,          // the communicator was destroyed or aborted while the call was pending
  kUnavailable,      // a transport, device or package is not available here
  kNotSupported,     // the request is valid but this build or backend does not do it
  kNoMemory,         // an allocation or a registration failed
  kBusy,             // back-pressure: retry later (the transport contract's "not now")
  kProtocolError,    // a peer sent something malformed
  kIoError,          // a system call failed
  kInternal,         // a bug in eagercomm
};

// True when `raw` is a StatusCode value (for codes received from peers).
inline bool is_valid_status_code(uint64_t raw) {
  return raw <= static_cast<uint64_t>(StatusCode::kInternal);
}

// Lower-case name of a code ("invalid argument").
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  // True for kOk and kInProgress: the call has not failed (yet).
  bool pending_or_ok() const {
    return code_ == StatusCode::kOk || code_ == StatusCode::kInProgress;
  }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid argument: allreduce: null send buffer with count 4".
  std::string to_string() const;

  // Prefixes the message with context ("communicator rank 2: ") and returns *this.
  Status& prepend(std::string_view context);

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// printf-style constructors for error statuses.
Status make_status(StatusCode code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

inline Status in_progress() { return Status(StatusCode::kInProgress, {}); }

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<1>, std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : v_(std::in_place_index<0>, std::move(status)) {  // NOLINT
    if (std::get<0>(v_).ok()) {
      v_.template emplace<0>(StatusCode::kInternal, "Result built from an ok Status");
    }
  }

  bool ok() const { return v_.index() == 1; }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<0>(v_);
  }
  T& value() & { return std::get<1>(v_); }
  const T& value() const& { return std::get<1>(v_); }
  T&& value() && { return std::get<1>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace eagercomm

#define EC_CONCAT_INNER_(a, b) a##b
#define EC_CONCAT_(a, b) EC_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is an error.
#define EC_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::eagercomm::Status ec_status_ = (expr); \
    if (!ec_status_.ok()) return ec_status_; \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define EC_ASSIGN_OR_RETURN(lhs, expr) \
  EC_ASSIGN_OR_RETURN_IMPL_(EC_CONCAT_(ec_result_, __LINE__), lhs, expr)
#define EC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
