// Python objects as eagercomm buffers (py_buffers.h).
#include "python/py_buffers.h"

#include <cstring>
#include <optional>
#include <string_view>

#include "python/py_errors.h"

namespace eagercomm::py {
namespace {

namespace pyb = pybind11;

std::string type_name(pyb::handle obj) {
  return pyb::str(pyb::type::handle_of(obj).attr("__qualname__")).cast<std::string>();
}

bool is_tensor_like(pyb::handle obj) {
  for (const char* attr : {"data_ptr", "dtype", "is_contiguous", "numel", "device"}) {
    if (!pyb::hasattr(obj, attr)) return false;
  }
  return true;
}

std::optional<DataType> dtype_from_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  Result<DataType> parsed = parse_dtype(name);
  if (parsed.ok()) return parsed.value();
  return std::nullopt;
}

// The element type of a buffer-protocol format, or nullopt. Native order only ('@', '=', '<'
// on the little-endian machines eagercomm runs on).
std::optional<DataType> dtype_from_format(const char* format, Py_ssize_t itemsize) {
  std::string_view f = format != nullptr ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.remove_prefix(1);
  if (f.size() != 1) return std::nullopt;
  switch (f[0]) {
    case 'f':
      return DataType::kFloat32;
    case 'd':
      return DataType::kFloat64;
    case 'e':
      return DataType::kFloat16;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return DataType::kInt32;
      if (itemsize == 8) return DataType::kInt64;
      return std::nullopt;
  }
  return std::nullopt;
}

// What a format the module does not take holds, for the error message.
std::string format_name(const char* format, Py_ssize_t itemsize) {
  std::string_view f = format != nullptr ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.remove_prefix(1);
  const std::string bits = std::to_string(itemsize * 8);
  if (f == "?") return "bool";
  if (f == "b" || f == "h" || f == "i" || f == "l" || f == "q") return "int" + bits;
  if (f == "B" || f == "H" || f == "I" || f == "L" || f == "Q") return "uint" + bits;
  if (f == "Zf" || f == "Zd" || f == "Zg") return "complex" + bits;
  if (f == "g") return "long double";
  return bits + "-bit elements";
}

constexpr const char* kAccepted =
    "float32, float64, float16, int32 and int64 buffers, or CPU torch tensors of those and "
    "bfloat16";

}  // namespace

const char* long_dtype_name(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "?";
}

const char* numpy_format(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "f";
    case DataType::kFloat64:
      return "d";
    case DataType::kFloat16:
      return "e";
    case DataType::kBFloat16:
      return "H";
    case DataType::kInt32:
      return "i";
    case DataType::kInt64:
      return "q";
  }
  return "B";
}

std::unique_ptr<BufferRef> BufferRef::get(pyb::handle obj, const char* what, bool writable) {
  std::unique_ptr<BufferRef> ref(new BufferRef());
  ref->what_ = what;
  ref->object_ = pyb::reinterpret_borrow<pyb::object>(obj);
  if (obj.is_none()) {
    raise_type_error(std::string(what) + " is None; expected " + kAccepted);
  }
  if (is_tensor_like(obj)) {
    const std::string device = pyb::str(obj.attr("device").attr("type")).cast<std::string>();
    if (device == "meta") {
      // Not a GPU: a meta tensor has shape and dtype but no memory at all.
      raise_value_error(std::string(what) +
                        " is a meta tensor (it has no data to communicate); eagercomm takes CPU "
                        "tensors");
    }
    if (device == "cuda") {
      check(Status(StatusCode::kNotSupported,
                   std::string(what) +
                       " is a torch tensor on 'cuda': GPU tensors need the CUDA build of "
                       "eagercomm; this module takes CPU tensors"));
    }
    if (device != "cpu") {
      check(Status(StatusCode::kNotSupported, std::string(what) + " is a torch tensor on '" +
                                                  device + "'; this module takes CPU tensors"));
    }
    // Before anything else asks the tensor for its memory: a sparse tensor has no single
    // buffer (data_ptr() and is_contiguous() raise torch's own RuntimeError).
    if (pyb::hasattr(obj, "layout")) {
      const std::string layout = pyb::str(obj.attr("layout")).cast<std::string>();
      if (layout != "torch.strided") {
        raise_value_error(std::string(what) + " is a " + layout +
                          " tensor; eagercomm takes dense (torch.strided) tensors: call "
                          ".to_dense() first");
      }
    }
    const std::string dtype = pyb::str(obj.attr("dtype")).cast<std::string>();
    const std::optional<DataType> type = dtype_from_name(dtype);
    if (!type) {
      raise_type_error(std::string(what) + " is a tensor of " + dtype + "; eagercomm takes " +
                       kAccepted);
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      raise_value_error(std::string(what) +
                        " is a non-contiguous tensor (its memory is used in place: make it "
                        "contiguous first, and for an output keep the contiguous tensor)");
    }
    ref->type_ = *type;
    ref->count_ = obj.attr("numel")().cast<size_t>();
    ref->data_ = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
    return ref;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    raise_type_error(std::string(what) + " is a " + type_name(obj) + "; expected " + kAccepted);
  }
  if (PyObject_GetBuffer(obj.ptr(), &ref->view_, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    raise_type_error(std::string(what) + " (a " + type_name(obj) +
                     ") does not expose its memory as a buffer");
  }
  ref->has_view_ = true;
  const Py_buffer& v = ref->view_;
  if (writable && v.readonly) {
    raise_value_error(std::string(what) + " is read-only (a " + type_name(obj) +
                      "); the result is written into it, so pass a writable buffer");
  }
  const std::optional<DataType> type = dtype_from_format(v.format, v.itemsize);
  if (!type) {
    raise_type_error(std::string(what) + " holds " + format_name(v.format, v.itemsize) +
                     " (format '" + (v.format != nullptr ? v.format : "B") +
                     "'); eagercomm takes " + kAccepted);
  }
  if (!PyBuffer_IsContiguous(&v, 'C')) {
    raise_value_error(std::string(what) +
                      " is not C-contiguous (its memory is used in place: pass a contiguous "
                      "array, e.g. numpy.ascontiguousarray, and for an output keep that array)");
  }
  ref->type_ = *type;
  ref->count_ = static_cast<size_t>(v.len / v.itemsize);
  ref->data_ = v.buf;
  return ref;
}

BufferRef::~BufferRef() {
  if (has_view_) PyBuffer_Release(&view_);
}

DataType dtype_from_python(pyb::handle dtype) {
  std::string name;
  if (pyb::isinstance<pyb::str>(dtype)) {
    name = dtype.cast<std::string>();
  } else if (pyb::hasattr(dtype, "itemsize") && pyb::hasattr(dtype, "name")) {
    name = pyb::str(dtype.attr("name")).cast<std::string>();  // a numpy dtype
  } else if (PyType_Check(dtype.ptr()) && pyb::hasattr(dtype, "__name__")) {
    name = pyb::str(dtype.attr("__name__")).cast<std::string>();  // numpy.float32
  } else {
    name = pyb::str(dtype).cast<std::string>();  // torch.float32
  }
  const std::optional<DataType> type = dtype_from_name(name);
  if (!type) {
    raise_type_error("dtype '" + name +
                     "' is not supported (accepted: float32, float64, float16, bfloat16, int32, "
                     "int64, or f32, f64, f16, bf16, i32, i64)");
  }
  return *type;
}

}  // namespace eagercomm::py
