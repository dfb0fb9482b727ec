// The eagercomm._core exception classes and the raising of a Status as one of them.
//
//   eagercomm.Error                          every error of the runtime (attribute .code: the
//                                            status code's name, "timeout", ...)
//   InvalidArgumentError(Error, ValueError)  kInvalidArgument: bad count, root, read-only or
//                                            non-contiguous buffer, bad option
//   InvalidTypeError(Error, TypeError)       an object that is no buffer / tensor, an element
//                                            type eagercomm does not support, mismatched types
//   MismatchError(Error)                     kMismatch: ranks disagree on a collective
//   TimeoutError(Error, builtins.TimeoutError)  kTimeout
//   PeerFailedError(Error)                   kPeerFailed
//   AbortedError(Error)                      kAborted: destroyed or aborted
//   UnavailableError(Error)                  kUnavailable
//   NotSupportedError(Error)                 kNotSupported (a GPU tensor without the CUDA build)
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "runtime/status.h"

namespace eagercomm::py {

// Creates the classes and adds them to `m`. Once, at import.
void register_errors(pybind11::module_& m);

// Raises `status` (an error) as its exception class: throws pybind11::error_already_set. Needs
// the GIL.
[[noreturn]] void raise_status(const Status& status);

// Raises InvalidTypeError / InvalidArgumentError with `message` (code "invalid argument").
[[noreturn]] void raise_type_error(const std::string& message);
[[noreturn]] void raise_value_error(const std::string& message);

// raise_status(status) unless it is ok.
inline void check(const Status& status) {
  if (!status.ok()) raise_status(status);
}

}  // namespace eagercomm::py
