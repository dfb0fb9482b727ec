// Element types and reduction operators of the collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace eagercomm {

enum class DataType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
enum class ReduceOp : uint8_t { kSum, kMin, kMax };

inline constexpr DataType kAllDataTypes[] = {DataType::kFloat32, DataType::kFloat64,
                                             DataType::kFloat16, DataType::kBFloat16,
                                             DataType::kInt32,   DataType::kInt64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax};

// Bytes of one element.
size_t dtype_size(DataType type);
// "f32", "f64", "f16", "bf16", "i32", "i64".
std::string_view dtype_name(DataType type);
// "sum", "min", "max".
std::string_view reduce_op_name(ReduceOp op);

// Accepts the short names above and the usual long ones ("float", "float32", "double",
// "half", "bfloat16", "int", "int32", "int64", "long"); the error lists the accepted names.
Result<DataType> parse_dtype(std::string_view name);
Result<ReduceOp> parse_reduce_op(std::string_view name);

// True when `raw` is a valid DataType / ReduceOp value (for checking bytes from peers).
bool is_valid_dtype(uint32_t raw);
bool is_valid_reduce_op(uint32_t raw);

}  // namespace eagercomm
