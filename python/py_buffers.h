// Python objects as eagercomm buffers, without copies: anything with the buffer protocol
// (numpy arrays, bytearray, memoryview, array.array) and CPU torch tensors, recognised by duck
// typing (data_ptr, dtype, is_contiguous, numel, device) so that the module never imports torch.
//
// Rules: the memory must be C-contiguous; a buffer that is written must be writable; the
// element type comes from the buffer's format (float32 'f', float64 'd', float16 'e', int32,
// int64) or the tensor's dtype (also bfloat16). Anything else raises InvalidTypeError or
// InvalidArgumentError naming the argument and what is wrong with it.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <string>

#include "collectives/dtype.h"

namespace eagercomm::py {

// A view of one Python object's memory, holding the object (and its Py_buffer) until
// destroyed. Create and destroy with the GIL held; the pointer may be used without it.
class BufferRef {
 public:
  // `what` names the argument in errors ("send", "recv", ...).
  static std::unique_ptr<BufferRef> get(pybind11::handle obj, const char* what, bool writable);
  ~BufferRef();
  BufferRef(const BufferRef&) = delete;
  BufferRef& operator=(const BufferRef&) = delete;

  void* data() const { return data_; }
  size_t count() const { return count_; }
  DataType type() const { return type_; }
  const pybind11::object& object() const { return object_; }
  const char* what() const { return what_; }

 private:
  BufferRef() = default;
  pybind11::object object_;
  Py_buffer view_{};
  bool has_view_ = false;
  void* data_ = nullptr;
  size_t count_ = 0;
  DataType type_ = DataType::kFloat32;
  const char* what_ = "";
};

// An element type given as a name ("float32", "f32", "int64", ...), a numpy dtype or scalar
// type, or a torch dtype. InvalidTypeError otherwise.
DataType dtype_from_python(pybind11::handle dtype);

// The struct-module format of `type` for numpy ('f', 'd', 'e', 'i', 'q'; bfloat16: 'H', its
// bits as uint16).
const char* numpy_format(DataType type);

// The type's name as numpy and torch spell it ("float32", "bfloat16", ...).
const char* long_dtype_name(DataType type);

}  // namespace eagercomm::py
