// Test helper: buffers of any DataType, read and written as doubles (exact for the small
// integers the tests use).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/kernels/element_value.h"

namespace eagercomm::test {

// A byte buffer of `count` elements of `type`, 64-byte aligned.
struct TypedBuffer {
  TypedBuffer() = default;
  TypedBuffer(DataType type, size_t count)
      : type(type), count(count), bytes(count * dtype_size(type)), storage(bytes / 8 + 16) {}
  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  void set(size_t i, double v) { store_element(type, data(), i, v); }
  double get(size_t i) const { return load_element(type, data(), i); }
  DataType type = DataType::kFloat32;
  size_t count = 0;
  size_t bytes = 0;
  std::vector<uint64_t> storage;
};

}  // namespace eagercomm::test
