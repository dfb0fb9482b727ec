// Checks of the tensors handed to eagercomm from torch: every refusal names the operation and
// what was wrong, as a TypeError (dtype) or ValueError (device, layout, count) in Python.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <vector>

#include "collectives/dtype.h"

namespace eagercomm::torchext {

inline constexpr const char* kSupportedDtypes = "float32, float64, float16, bfloat16, int32, int64";

// The eagercomm type of `t`'s dtype; throws when there is none or `t` is not a dense CPU tensor.
inline DataType check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK_VALUE(t.defined(), "eagercomm backend: ", op, ": undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "eagercomm backend: ", op, ": tensor layout ",
                    t.layout(), " is not supported (dense tensors only)");
  // A meta tensor is no GPU tensor: it has no memory at all.
  TORCH_CHECK_VALUE(!t.is_meta(), "eagercomm backend: ", op,
                    ": tensor is on meta (a meta tensor has no data to communicate); only CPU "
                    "tensors are supported");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "eagercomm backend: ", op, ": tensor is on ", t.device(),
                    "; only CPU tensors are supported",
                    t.device().is_cuda() ? " (collectives on GPU memory are not built yet)" : "");
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    default:
      TORCH_CHECK_TYPE(false, "eagercomm backend: ", op, ": dtype ", t.scalar_type(),
                       " is not supported (supported: ", kSupportedDtypes, ")");
  }
  return DataType::kFloat32;  // not reached
}

inline void check_one_tensor(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "eagercomm backend: ", op,
                    " takes one tensor per process, got ", tensors.size());
}

}  // namespace eagercomm::torchext
