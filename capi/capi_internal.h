// Internal to the C API (capi/*.cc): the handle structs, the thread's last error, argument
// checks, and the guard that turns C++ failures into codes at the C boundary. Not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "capi/eagercomm.h"
#include "collectives/communicator.h"
#include "collectives/dtype.h"
#include "collectives/partial_allreduce.h"
#include "runtime/status.h"

// Handles start with a magic word, cleared by free, so that a handle of the wrong kind (or,
// best effort, one already freed) is reported instead of used.
inline constexpr uint64_t kCommMagic = 0x6563636f6d6d3031ull;     // "eccomm01"
inline constexpr uint64_t kPartialMagic = 0x6563706172743031ull;  // "ecpart01"

struct ec_comm {
  uint64_t magic = kCommMagic;
  std::unique_ptr<eagercomm::Communicator> comm;
};

struct ec_partial {
  uint64_t magic = kPartialMagic;
  std::unique_ptr<eagercomm::PartialAllreduce> pa;
};

namespace eagercomm::capi {

// Records `status` (prefixed with the C function's name) as this thread's last error and
// returns its code; an ok status clears the message.
ec_status record(const char* fn, const Status& status);
ec_status record_ok();

// kInvalidArgument "<fn>: <message>" as this thread's last error.
ec_status invalid(const char* fn, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Runs `body` (returning a Status) and maps what escapes it: std::bad_alloc to EC_NO_MEMORY,
// anything else to EC_INTERNAL. Nothing may unwind into C.
template <class F>
ec_status guarded(const char* fn, F&& body) noexcept {
  try {
    return record(fn, body());
  } catch (const std::bad_alloc&) {
    return record(fn, Status(StatusCode::kNoMemory, "out of memory"));
  } catch (const std::exception& e) {
    return record(fn,
                  Status(StatusCode::kInternal, std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return record(fn, Status(StatusCode::kInternal, "unexpected exception"));
  }
}

// The checked C++ value of a C enum argument, or kInvalidArgument naming the argument.
Result<DataType> to_dtype(ec_dtype dtype);
Result<ReduceOp> to_op(ec_op op);

// The handle's object, or kInvalidArgument: null, or not a live handle of that kind.
Result<Communicator*> comm_of(const ec_comm* comm);
Result<PartialAllreduce*> partial_of(const ec_partial* pa);

// The C++ timeout argument for timeout_ms (eagercomm.h, "Timeouts"): kConfiguredTimeout for
// EC_TIMEOUT_DEFAULT, kWaitForever for EC_WAIT_FOREVER and EC_TIMEOUT_INFINITE; kInvalidArgument
// for other negative values.
Result<std::chrono::nanoseconds> to_timeout(int64_t timeout_ms);

}  // namespace eagercomm::capi
