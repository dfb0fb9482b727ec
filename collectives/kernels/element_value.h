// One element of any DataType read or written as a double: for references, checks and tools
// (the benchmark's result check, tests) and a few elements per operation (a partial round's
// metadata digits), not for a buffer's data. Exact for integers up to 2^53 and for every value
// the target type can represent.
#pragma once

#include <cstdint>
#include <cstring>

#include "collectives/dtype.h"
#include "collectives/kernels/half.h"

namespace eagercomm {

inline void store_element(DataType t, void* buf, size_t i, double v) {
  auto* b = static_cast<uint8_t*>(buf);
  switch (t) {
    case DataType::kFloat32: {
      const float x = static_cast<float>(v);
      std::memcpy(b + 4 * i, &x, 4);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(b + 8 * i, &v, 8);
      break;
    case DataType::kFloat16: {
      const uint16_t x = float_to_half(static_cast<float>(v));
      std::memcpy(b + 2 * i, &x, 2);
      break;
    }
    case DataType::kBFloat16: {
      const uint16_t x = float_to_bf16(static_cast<float>(v));
      std::memcpy(b + 2 * i, &x, 2);
      break;
    }
    case DataType::kInt32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(b + 4 * i, &x, 4);
      break;
    }
    case DataType::kInt64: {
      const int64_t x = static_cast<int64_t>(v);
      std::memcpy(b + 8 * i, &x, 8);
      break;
    }
  }
}

inline double load_element(DataType t, const void* buf, size_t i) {
  const auto* b = static_cast<const uint8_t*>(buf);
  switch (t) {
    case DataType::kFloat32: {
      float x;
      std::memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case DataType::kFloat64: {
      double x;
      std::memcpy(&x, b + 8 * i, 8);
      return x;
    }
    case DataType::kFloat16: {
      uint16_t x;
      std::memcpy(&x, b + 2 * i, 2);
      return half_to_float(x);
    }
    case DataType::kBFloat16: {
      uint16_t x;
      std::memcpy(&x, b + 2 * i, 2);
      return bf16_to_float(x);
    }
    case DataType::kInt32: {
      int32_t x;
      std::memcpy(&x, b + 4 * i, 4);
      return x;
    }
    case DataType::kInt64: {
      int64_t x;
      std::memcpy(&x, b + 8 * i, 8);
      return static_cast<double>(x);
    }
  }
  return 0;
}

}  // namespace eagercomm
