#include "collectives/dtype.h"

#include <string>

namespace eagercomm {

size_t dtype_size(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

Result<DataType> parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DataType type;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DataType::kFloat32},       {"float", DataType::kFloat32},
      {"float32", DataType::kFloat32},   {"f64", DataType::kFloat64},
      {"double", DataType::kFloat64},    {"float64", DataType::kFloat64},
      {"f16", DataType::kFloat16},       {"half", DataType::kFloat16},
      {"float16", DataType::kFloat16},   {"bf16", DataType::kBFloat16},
      {"bfloat16", DataType::kBFloat16}, {"i32", DataType::kInt32},
      {"int", DataType::kInt32},         {"int32", DataType::kInt32},
      {"i64", DataType::kInt64},         {"int64", DataType::kInt64},
      {"long", DataType::kInt64},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.type;
  }
  return make_status(StatusCode::kInvalidArgument,
                     "unknown data type '%.*s' (accepted: f32, f64, f16, bf16, i32, i64)",
                     static_cast<int>(name.size()), name.data());
}

Result<ReduceOp> parse_reduce_op(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  return make_status(StatusCode::kInvalidArgument,
                     "unknown reduction operator '%.*s' (accepted: sum, min, max)",
                     static_cast<int>(name.size()), name.data());
}

bool is_valid_dtype(uint32_t raw) { return raw <= static_cast<uint32_t>(DataType::kInt64); }
bool is_valid_reduce_op(uint32_t raw) { return raw <= static_cast<uint32_t>(ReduceOp::kMax); }

}  // namespace eagercomm
