#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "collectives/cuda/cuda_reduce.h"

namespace eagercomm::cuda {
namespace {

// Values are combined in Acc (f32 for the half types) and stored back as T. Semantics are the
// CPU kernels' (reduce_kernels.h), bit for bit: one IEEE operation, a NaN result is the type's
// canonical quiet NaN, min(-0, +0) = -0 and max(-0, +0) = +0 in either order, integer sums wrap.
template <class T>
struct Io {
  using Acc = T;
  __device__ static Acc load(T v) { return v; }
  __device__ static T store(Acc v) {
    if constexpr (std::is_same_v<T, float>) return isnan(v) ? __int_as_float(0x7FC00000) : v;
    if constexpr (std::is_same_v<T, double>) {
      return isnan(v) ? __longlong_as_double(0x7FF8000000000000LL) : v;
    }
    return v;
  }
};
template <>
struct Io<__half> {
  using Acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) {
    return isnan(v) ? __ushort_as_half(0x7E00) : __float2half_rn(v);
  }
};
template <>
struct Io<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) {
    return isnan(v) ? __ushort_as_bfloat16(0x7FC0) : __float2bfloat16_rn(v);
  }
};

template <class A>
__device__ A combine(ReduceOp op, A x, A y) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    switch (op) {
      case ReduceOp::kSum:
        return static_cast<A>(static_cast<U>(x) + static_cast<U>(y));  // wraps, no UB
      case ReduceOp::kMin:
        return x < y ? x : y;
      case ReduceOp::kMax:
        return x > y ? x : y;
    }
    return x;
  } else {
    switch (op) {
      case ReduceOp::kSum:
        return x + y;  // a NaN is made canonical by store()
      case ReduceOp::kMin:
        if (isnan(x) || isnan(y)) return x + y;  // NaN, canonical after store()
        if (x == y) return signbit(x) ? x : y;   // -0 wins
        return x < y ? x : y;
      case ReduceOp::kMax:
        if (isnan(x) || isnan(y)) return x + y;
        if (x == y) return signbit(x) ? y : x;  // +0 wins
        return x > y ? x : y;
    }
    return x;
  }
}

// Grid-stride loop: any count with a bounded grid.
template <class T>
__global__ void reduce_kernel(ReduceOp op, T* out, const T* a, const T* b, size_t count) {
  using IoT = Io<T>;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = IoT::store(combine(op, IoT::load(a[i]), IoT::load(b[i])));
  }
}

template <class T>
Status launch(ReduceOp op, void* out, const void* a, const void* b, size_t count,
              cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const size_t blocks = (count + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
  // cudaLaunchKernel returns this launch's own error. A <<<>>> launch checked with
  // cudaGetLastError() would also report (and clear) an error that an earlier, unrelated call
  // of the application left behind, failing a good launch.
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  void* args[] = {&op, &o, &x, &y, &count};
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(&reduce_kernel<T>),
                                         dim3(grid), dim3(kThreads), args, 0, stream);
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // this launch's error, reported here: not left for the application
  const StatusCode code = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                              ? StatusCode::kUnavailable
                              : StatusCode::kInternal;
  return make_status(code, "cuda reduce of %zu elements: %s", count, cudaGetErrorString(e));
}

}  // namespace

bool reduce_built() { return true; }

Status reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count,
              void* stream) {
  if (count == 0) return Status::Ok();
  if (out == nullptr || a == nullptr || b == nullptr) {
    return Status(StatusCode::kInvalidArgument, "cuda reduce: null buffer");
  }
  for (const void* p : {static_cast<const void*>(out), a, b}) {
    if (Status s = check_alignment("cuda reduce", type, p); !s.ok()) return s;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DataType::kFloat32:
      return launch<float>(op, out, a, b, count, s);
    case DataType::kFloat64:
      return launch<double>(op, out, a, b, count, s);
    case DataType::kFloat16:
      return launch<__half>(op, out, a, b, count, s);
    case DataType::kBFloat16:
      return launch<__nv_bfloat16>(op, out, a, b, count, s);
    case DataType::kInt32:
      return launch<int32_t>(op, out, a, b, count, s);
    case DataType::kInt64:
      return launch<int64_t>(op, out, a, b, count, s);
  }
  return Status(StatusCode::kInvalidArgument, "cuda reduce: unknown data type");
}

}  // namespace eagercomm::cuda
