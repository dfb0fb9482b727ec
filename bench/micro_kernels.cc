// Google Benchmark suite for the reduction kernels (part of eagercomm-microbench).
//
// reduce/<type>/<bytes> and reduce2/<type>/<bytes> run a sum over two inputs of <bytes> each;
// memcpy/<bytes> and copy2/<bytes> copy <bytes> as the bandwidth reference. bytes_per_second
// counts the memory traffic of one call, reads plus writes (reduce: 3 x bytes, reduce2: 4 x,
// memcpy: 2 x, copy2: 3 x), so every line compares directly with memcpy and with the machine's
// memory bandwidth; input_bytes_per_second is the per-input rate (what a ring step sees).
// The `path` context line names the instruction set the kernels dispatched to.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/kernels/half.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm {
namespace {

constexpr int64_t kSizes[] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};

// A buffer of `bytes` filled with `value` in `type` (touching every page up front, and using
// ordinary numbers: NaNs or subnormals would measure a different code path).
std::vector<unsigned char> filled_buffer(DataType type, size_t bytes, double value) {
  std::vector<unsigned char> buf(bytes);
  const size_t esize = dtype_size(type);
  unsigned char element[8] = {};
  switch (type) {
    case DataType::kFloat32: {
      const auto v = static_cast<float>(value);
      std::memcpy(element, &v, sizeof(v));
      break;
    }
    case DataType::kFloat64:
      std::memcpy(element, &value, sizeof(value));
      break;
    case DataType::kFloat16: {
      const uint16_t v = float_to_half(static_cast<float>(value));
      std::memcpy(element, &v, sizeof(v));
      break;
    }
    case DataType::kBFloat16: {
      const uint16_t v = float_to_bf16(static_cast<float>(value));
      std::memcpy(element, &v, sizeof(v));
      break;
    }
    case DataType::kInt32:
    case DataType::kInt64: {
      const auto v = static_cast<int64_t>(value);
      std::memcpy(element, &v, esize);
      break;
    }
  }
  for (size_t off = 0; off + esize <= bytes; off += esize) std::memcpy(&buf[off], element, esize);
  return buf;
}

void set_rates(benchmark::State& state, int64_t input_bytes, int64_t traffic_per_call) {
  state.SetBytesProcessed(state.iterations() * traffic_per_call);
  state.counters["input_bytes_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations() * input_bytes),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

void BM_ReduceSum(benchmark::State& state, DataType type) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dtype_size(type);
  const std::vector<unsigned char> a = filled_buffer(type, bytes, 1.5);
  const std::vector<unsigned char> b = filled_buffer(type, bytes, 0.25);
  std::vector<unsigned char> out = filled_buffer(type, bytes, 0.0);
  for (auto _ : state) {
    reduce(type, ReduceOp::kSum, out.data(), a.data(), b.data(), count);
    benchmark::ClobberMemory();
  }
  set_rates(state, state.range(0), 3 * state.range(0));
}

void BM_Reduce2Sum(benchmark::State& state, DataType type) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dtype_size(type);
  const std::vector<unsigned char> a = filled_buffer(type, bytes, 1.5);
  const std::vector<unsigned char> b = filled_buffer(type, bytes, 0.25);
  std::vector<unsigned char> out1 = filled_buffer(type, bytes, 0.0);
  std::vector<unsigned char> out2 = filled_buffer(type, bytes, 0.0);
  for (auto _ : state) {
    reduce2(type, ReduceOp::kSum, out1.data(), out2.data(), a.data(), b.data(), count);
    benchmark::ClobberMemory();
  }
  set_rates(state, state.range(0), 4 * state.range(0));
}

// reduce on one specific instruction set, to see what each path gains over the portable one.
void BM_ReduceSumWithIsa(benchmark::State& state, DataType type, detail::KernelIsa isa) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dtype_size(type);
  const std::vector<unsigned char> a = filled_buffer(type, bytes, 1.5);
  const std::vector<unsigned char> b = filled_buffer(type, bytes, 0.25);
  std::vector<unsigned char> out = filled_buffer(type, bytes, 0.0);
  for (auto _ : state) {
    detail::reduce_with_isa(isa, type, ReduceOp::kSum, out.data(), a.data(), b.data(), count);
    benchmark::ClobberMemory();
  }
  set_rates(state, state.range(0), 3 * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const std::vector<unsigned char> in = filled_buffer(DataType::kInt32, bytes, 7);
  std::vector<unsigned char> out = filled_buffer(DataType::kInt32, bytes, 0);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), bytes);
    benchmark::ClobberMemory();
  }
  set_rates(state, state.range(0), 2 * state.range(0));
}

void BM_Copy2(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  const std::vector<unsigned char> in = filled_buffer(DataType::kInt32, bytes, 7);
  std::vector<unsigned char> out1 = filled_buffer(DataType::kInt32, bytes, 0);
  std::vector<unsigned char> out2 = filled_buffer(DataType::kInt32, bytes, 0);
  for (auto _ : state) {
    copy2(out1.data(), out2.data(), in.data(), bytes);
    benchmark::ClobberMemory();
  }
  set_rates(state, state.range(0), 3 * state.range(0));
}

void register_kernel_benchmarks() {
  benchmark::AddCustomContext("reduce_kernels_isa", reduce_kernels_isa());
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                            DataType::kFloat64};
  for (DataType type : types) {
    const std::string name(dtype_name(type));
    auto* reduce_bm =
        benchmark::RegisterBenchmark(("reduce/sum/" + name).c_str(), BM_ReduceSum, type);
    auto* reduce2_bm =
        benchmark::RegisterBenchmark(("reduce2/sum/" + name).c_str(), BM_Reduce2Sum, type);
    for (int64_t size : kSizes) {
      reduce_bm->Arg(size);
      reduce2_bm->Arg(size);
    }
    for (detail::KernelIsa isa :
         {detail::KernelIsa::kGeneric, detail::KernelIsa::kAvx2, detail::KernelIsa::kAvx512}) {
      if (!detail::kernel_isa_available(isa)) continue;
      const std::string isa_name = "reduce_isa/sum/" + name + "/" + detail::kernel_isa_name(isa);
      benchmark::RegisterBenchmark(isa_name.c_str(), BM_ReduceSumWithIsa, type, isa)
          ->Arg(256 << 10);
    }
  }
  auto* memcpy_bm = benchmark::RegisterBenchmark("memcpy", BM_Memcpy);
  auto* copy2_bm = benchmark::RegisterBenchmark("copy2", BM_Copy2);
  for (int64_t size : kSizes) {
    memcpy_bm->Arg(size);
    copy2_bm->Arg(size);
  }
}

// Registered at load time, like the BENCHMARK() macros of the other micro_*.cc files.
const bool kRegistered = (register_kernel_benchmarks(), true);

}  // namespace
}  // namespace eagercomm
