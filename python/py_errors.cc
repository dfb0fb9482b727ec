// eagercomm._core's exceptions (py_errors.h).
#include "python/py_errors.h"

#include "python/py_interrupt.h"

namespace eagercomm::py {
namespace {

namespace pyb = pybind11;
using signals::pending_interrupt;

// Owned by the module for the life of the process (exception classes are never unloaded).
struct Classes {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* invalid_type = nullptr;
  PyObject* by_code[static_cast<int>(StatusCode::kInternal) + 1] = {};
};
Classes g_classes;

PyObject* make_class(pyb::module_& m, const char* name, const char* doc, PyObject* bases) {
  const std::string qualified = std::string("eagercomm.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw pyb::error_already_set();
  m.add_object(name, pyb::reinterpret_borrow<pyb::object>(cls));
  return cls;  // the module's reference keeps it; so does this one (never released)
}

PyObject* make_subclass(pyb::module_& m, const char* name, const char* doc, PyObject* builtin) {
  PyObject* bases = builtin == nullptr ? PyTuple_Pack(1, g_classes.error)
                                       : PyTuple_Pack(2, g_classes.error, builtin);
  if (bases == nullptr) throw pyb::error_already_set();
  PyObject* cls = make_class(m, name, doc, bases);
  Py_DECREF(bases);
  return cls;
}

[[noreturn]] void raise_as(PyObject* cls, StatusCode code, const std::string& message) {
  pyb::object exc = pyb::reinterpret_borrow<pyb::object>(cls)(pyb::str(message));
  exc.attr("code") = pyb::str(std::string(status_code_name(code)));
  // A Ctrl-C that came while the call ran is raised now, with this error as its context: left
  // pending, it would fire inside the traceback printer, which then gives up ("lost sys.stderr").
  if (pending_interrupt()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != nullptr) PyException_SetContext(value, exc.release().ptr());  // steals
    PyErr_Restore(type, value, tb);
    throw pyb::error_already_set();
  }
  PyErr_SetObject(cls, exc.ptr());
  throw pyb::error_already_set();
}

}  // namespace

void register_errors(pyb::module_& m) {
  g_classes.error =
      make_class(m, "Error", "An error reported by the eagercomm runtime.", PyExc_Exception);
  g_classes.invalid_argument =
      make_subclass(m, "InvalidArgumentError",
                    "A bad argument: count, root, buffer layout, option.", PyExc_ValueError);
  g_classes.invalid_type = make_subclass(
      m, "InvalidTypeError", "An object or element type eagercomm cannot use.", PyExc_TypeError);
  auto& by = g_classes.by_code;
  by[static_cast<int>(StatusCode::kInvalidArgument)] = g_classes.invalid_argument;
  by[static_cast<int>(StatusCode::kMismatch)] =
      make_subclass(m, "MismatchError", "Ranks disagree on a collective's arguments.", nullptr);
  by[static_cast<int>(StatusCode::kTimeout)] =
      make_subclass(m, "TimeoutError", "A blocking call ran past its timeout.", PyExc_TimeoutError);
  by[static_cast<int>(StatusCode::kPeerFailed)] = make_subclass(
      m, "PeerFailedError", "A peer rank is gone: destroyed, dead or unreachable.", nullptr);
  by[static_cast<int>(StatusCode::kAborted)] =
      make_subclass(m, "AbortedError",
                    "The communicator or partial allreduce was destroyed or aborted.", nullptr);
  by[static_cast<int>(StatusCode::kUnavailable)] = make_subclass(
      m, "UnavailableError", "A transport, device or package is not available here.", nullptr);
  by[static_cast<int>(StatusCode::kNotSupported)] = make_subclass(
      m, "NotSupportedError", "Valid, but this build or backend does not do it.", nullptr);
}

void raise_status(const Status& status) {
  PyObject* cls = g_classes.by_code[static_cast<int>(status.code())];
  raise_as(cls != nullptr ? cls : g_classes.error, status.code(), status.to_string());
}

void raise_type_error(const std::string& message) {
  raise_as(g_classes.invalid_type, StatusCode::kInvalidArgument, "invalid argument: " + message);
}

void raise_value_error(const std::string& message) {
  raise_as(g_classes.invalid_argument, StatusCode::kInvalidArgument,
           "invalid argument: " + message);
}

}  // namespace eagercomm::py
