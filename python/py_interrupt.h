// Ctrl-C in calls that wait without the GIL (eagercomm._core, eagercomm._torch).
//
// CPython's SIGINT handler only sets a flag; KeyboardInterrupt is raised when the main thread
// runs PyErr_CheckSignals, which a thread waiting in C++ never does. So waits are cut into
// slices of kSignalCheckEvery and the thread looks for signals between them (a few microseconds
// with the GIL, 20 times a second). A signal still pending when an error is raised would make
// the traceback printer run the handler in the middle of printing and give up ("lost
// sys.stderr"), hence pending_interrupt() before raising errors.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>
#include <string>

#include "runtime/status.h"

// Not eagercomm::py: the torch extension's files call pybind11 `py`, which that namespace would
// hide inside namespace eagercomm.
namespace eagercomm::signals {

inline constexpr std::chrono::milliseconds kSignalCheckEvery{50};

// Whether the interpreter can still run Python code (not during finalization, when taking the
// GIL from a thread may never return).
inline bool python_running() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// With the GIL: runs the pending signal handlers; true when one raised (KeyboardInterrupt: the
// Python error is set).
inline bool pending_interrupt() { return python_running() && PyErr_CheckSignals() != 0; }

// The signal checks of one waiting call. check() is called without the GIL (it takes it); once
// it has returned true, rethrow() raises what the signal handler raised (as
// pybind11::error_already_set, which pybind11 restores as the Python exception).
class Interrupt {
 public:
  bool check() {
    if (error_) return true;
    if (!python_running()) return false;
    pybind11::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;
    error_.emplace();  // takes the exception out of this thread's error indicator
    name_ = pybind11::str(error_->type().attr("__name__")).cast<std::string>();
    return true;
  }
  bool raised() const { return error_.has_value(); }
  // What the runtime is told about an interrupted wait (the peers may read it).
  Status status() const {
    return Status(StatusCode::kAborted, "interrupted by a signal (" + name_ + ")");
  }
  [[noreturn]] void rethrow() {
    pybind11::error_already_set e = std::move(*error_);
    error_.reset();
    throw e;
  }

 private:
  std::optional<pybind11::error_already_set> error_;
  std::string name_;
};

}  // namespace eagercomm::signals
