// Test helper: buffers of any DataType, read and written as doubles (exact for the small
// integers the tests use).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/half.h"

namespace eagercomm::test {

inline void store(DataType t, void* buf, size_t i, double v) {
  auto* b = static_cast<uint8_t*>(buf);
  switch (t) {
    case DataType::kFloat32: { float x = static_cast<float>(v); std::memcpy(b + 4 * i, &x, 4); break; }
    case DataType::kFloat64: std::memcpy(b + 8 * i, &v, 8); break;
    case DataType::kFloat16: { uint16_t x = float_to_half(static_cast<float>(v)); std::memcpy(b + 2 * i, &x, 2); break; }
    case DataType::kBFloat16: { uint16_t x = float_to_bf16(static_cast<float>(v)); std::memcpy(b + 2 * i, &x, 2); break; }
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(b + 4 * i, &x, 4); break; }
    case DataType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(b + 8 * i, &x, 8); break; }
  }
}

inline double load(DataType t, const void* buf, size_t i) {
  const auto* b = static_cast<const uint8_t*>(buf);
  switch (t) {
    case DataType::kFloat32: { float x; std::memcpy(&x, b + 4 * i, 4); return x; }
    case DataType::kFloat64: { double x; std::memcpy(&x, b + 8 * i, 8); return x; }
    case DataType::kFloat16: { uint16_t x; std::memcpy(&x, b + 2 * i, 2); return half_to_float(x); }
    case DataType::kBFloat16: { uint16_t x; std::memcpy(&x, b + 2 * i, 2); return bf16_to_float(x); }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, b + 4 * i, 4); return x; }
    case DataType::kInt64: { int64_t x; std::memcpy(&x, b + 8 * i, 8); return static_cast<double>(x); }
  }
  return 0;
}

// A byte buffer of `count` elements of `type`, 64-byte aligned.
struct TypedBuffer {
  TypedBuffer() = default;
  TypedBuffer(DataType type, size_t count)
      : type(type), count(count), bytes(count * dtype_size(type)), storage(bytes / 8 + 16) {}
  void* data() { return storage.data(); }
  const void* data() const { return storage.data(); }
  void set(size_t i, double v) { store(type, data(), i, v); }
  double get(size_t i) const { return load(type, data(), i); }
  DataType type = DataType::kFloat32;
  size_t count = 0;
  size_t bytes = 0;
  std::vector<uint64_t> storage;
};

}  // namespace eagercomm::test
