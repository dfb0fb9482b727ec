// The C API's error reporting, version, enum and handle checks.
#include <cstdarg>
#include <cstdio>
#include <string>

#include "capi/capi_internal.h"
#include "runtime/config.h"

namespace eagercomm::capi {
namespace {

// One message per thread: C callers read it right after the failing call, on that thread, and
// threads calling at once must not see each other's messages.
thread_local std::string t_last_error;

static_assert(EC_OK == static_cast<int>(StatusCode::kOk));
static_assert(EC_IN_PROGRESS == static_cast<int>(StatusCode::kInProgress));
static_assert(EC_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument));
static_assert(EC_MISMATCH == static_cast<int>(StatusCode::kMismatch));
static_assert(EC_TIMEOUT == static_cast<int>(StatusCode::kTimeout));
static_assert(EC_PEER_FAILED == static_cast<int>(StatusCode::kPeerFailed));
static_assert(EC_ABORTED == static_cast<int>(StatusCode::kAborted));
static_assert(EC_UNAVAILABLE == static_cast<int>(StatusCode::kUnavailable));
static_assert(EC_NOT_SUPPORTED == static_cast<int>(StatusCode::kNotSupported));
static_assert(EC_NO_MEMORY == static_cast<int>(StatusCode::kNoMemory));
static_assert(EC_BUSY == static_cast<int>(StatusCode::kBusy));
static_assert(EC_PROTOCOL_ERROR == static_cast<int>(StatusCode::kProtocolError));
static_assert(EC_IO_ERROR == static_cast<int>(StatusCode::kIoError));
static_assert(EC_INTERNAL == static_cast<int>(StatusCode::kInternal));

static_assert(EC_FLOAT32 == static_cast<int>(DataType::kFloat32));
static_assert(EC_FLOAT64 == static_cast<int>(DataType::kFloat64));
static_assert(EC_FLOAT16 == static_cast<int>(DataType::kFloat16));
static_assert(EC_BFLOAT16 == static_cast<int>(DataType::kBFloat16));
static_assert(EC_INT32 == static_cast<int>(DataType::kInt32));
static_assert(EC_INT64 == static_cast<int>(DataType::kInt64));
static_assert(EC_SUM == static_cast<int>(ReduceOp::kSum));
static_assert(EC_MIN == static_cast<int>(ReduceOp::kMin));
static_assert(EC_MAX == static_cast<int>(ReduceOp::kMax));

}  // namespace

ec_status record(const char* fn, const Status& status) {
  if (status.ok()) return record_ok();
  if (status.code() == StatusCode::kInProgress) {  // "not yet" is no error: nothing to say
    t_last_error.clear();
    return EC_IN_PROGRESS;
  }
  Status s = status;
  s.prepend(std::string(fn) + ": ");
  t_last_error = s.to_string();
  return static_cast<ec_status>(status.code());
}

ec_status record_ok() {
  t_last_error.clear();
  return EC_OK;
}

ec_status invalid(const char* fn, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return record(fn, Status(StatusCode::kInvalidArgument, buf));
}

Result<DataType> to_dtype(ec_dtype dtype) {
  // Read as an integer: a C caller may pass any int where the enum is expected.
  const int raw = static_cast<int>(dtype);
  if (raw < 0 || !is_valid_dtype(static_cast<uint32_t>(raw))) {
    return make_status(StatusCode::kInvalidArgument,
                       "dtype %d is not an ec_dtype (EC_FLOAT32 .. EC_INT64, 0 .. 5)", raw);
  }
  return static_cast<DataType>(raw);
}

Result<ReduceOp> to_op(ec_op op) {
  const int raw = static_cast<int>(op);
  if (raw < 0 || !is_valid_reduce_op(static_cast<uint32_t>(raw))) {
    return make_status(StatusCode::kInvalidArgument,
                       "op %d is not an ec_op (EC_SUM, EC_MIN, EC_MAX: 0 .. 2)", raw);
  }
  return static_cast<ReduceOp>(raw);
}

Result<Communicator*> comm_of(const ec_comm* comm) {
  if (comm == nullptr) return Status(StatusCode::kInvalidArgument, "null ec_comm handle");
  if (comm->magic != kCommMagic || !comm->comm) {
    return Status(StatusCode::kInvalidArgument,
                  "not a live ec_comm handle (freed, or not made by ec_comm_from_*)");
  }
  return comm->comm.get();
}

Result<PartialAllreduce*> partial_of(const ec_partial* pa) {
  if (pa == nullptr) return Status(StatusCode::kInvalidArgument, "null ec_partial handle");
  if (pa->magic != kPartialMagic || !pa->pa) {
    return Status(StatusCode::kInvalidArgument,
                  "not a live ec_partial handle (freed, or not made by ec_partial_create)");
  }
  return pa->pa.get();
}

Result<std::chrono::nanoseconds> to_timeout(int64_t timeout_ms) {
  if (timeout_ms == EC_TIMEOUT_DEFAULT) return kConfiguredTimeout;
  if (timeout_ms == EC_TIMEOUT_INFINITE) return kWaitForever;
  if (timeout_ms < 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "timeout_ms %lld is negative (EC_WAIT_FOREVER: no limit, "
                       "EC_TIMEOUT_DEFAULT: EAGERCOMM_TIMEOUT)",
                       static_cast<long long>(timeout_ms));
  }
  // EC_WAIT_FOREVER, and any limit the clock cannot count up to, is no limit.
  if (timeout_ms > kWaitForever.count() / 1000000) return kWaitForever;
  return std::chrono::nanoseconds(std::chrono::milliseconds(timeout_ms));
}

}  // namespace eagercomm::capi

using eagercomm::capi::t_last_error;

extern "C" {

const char* ec_last_error(void) { return t_last_error.c_str(); }

const char* ec_status_name(ec_status status) {
  const int raw = static_cast<int>(status);
  if (raw < 0 || !eagercomm::is_valid_status_code(static_cast<uint64_t>(raw))) {
    return "unknown status";
  }
  // status_code_name returns views of string literals: NUL-terminated.
  return eagercomm::status_code_name(static_cast<eagercomm::StatusCode>(raw)).data();
}

int ec_abi_version(void) { return EAGERCOMM_ABI_VERSION; }

size_t ec_dtype_size(ec_dtype dtype) {
  const auto type = eagercomm::capi::to_dtype(dtype);
  return type.ok() ? eagercomm::dtype_size(type.value()) : 0;
}

}  // extern "C"
