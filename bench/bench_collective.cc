#include "bench/bench_collective.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "bench/bench_memory.h"
#include "collectives/kernels/element_value.h"

namespace eagercomm::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Buffers {
  BenchBuffer send, recv;  // host or device memory (--device)
  void* s() { return send.data(); }
  void* r() { return recv.data(); }
};

class Runner {
 public:
  Runner(Communicator& comm, const Options& o)
      : comm_(comm), o_(o), P_(comm.size()), rank_(comm.rank()), es_(dtype_size(o.type)) {}

  Result<std::vector<Row>> run() {
    std::vector<Row> rows;
    const std::vector<size_t> sizes = size_list();
    size_t max_count = 0;
    for (size_t bytes : sizes) max_count = std::max(max_count, count_of(bytes));
    const size_t recv_elems = o_.coll == Collective::kAllgather ? max_count * P_ : max_count;
    EC_ASSIGN_OR_RETURN(buf_.send, BenchBuffer::allocate(o_.device, max_count * es_));
    EC_ASSIGN_OR_RETURN(buf_.recv, BenchBuffer::allocate(o_.device, recv_elems * es_));
    for (size_t bytes : sizes) {
      Row row;
      row.count = count_of(bytes);
      row.bytes = o_.coll == Collective::kAllgather ? row.count * es_ * P_ : row.count * es_;
      if (o_.coll == Collective::kBarrier) row.bytes = 0;
      EC_ASSIGN_OR_RETURN(row.out_of_place, measure(row.count, false));
      if (o_.in_place && o_.coll != Collective::kBarrier) {
        EC_ASSIGN_OR_RETURN(row.in_place, measure(row.count, true));
      }
      rows.push_back(row);
    }
    return rows;
  }

 private:
  std::vector<size_t> size_list() const {
    std::vector<size_t> sizes;
    if (o_.coll == Collective::kBarrier) return {0};
    for (double b = static_cast<double>(o_.min_bytes); b <= static_cast<double>(o_.max_bytes);
         b *= o_.factor) {
      const size_t bytes = static_cast<size_t>(b);
      if (count_of(bytes) > 0 && (sizes.empty() || count_of(bytes) != count_of(sizes.back()))) {
        sizes.push_back(bytes);
      }
    }
    return sizes;
  }

  size_t count_of(size_t bytes) const {
    if (o_.coll == Collective::kBarrier) return 0;
    return o_.coll == Collective::kAllgather ? bytes / es_ / P_ : bytes / es_;
  }

  // Where this rank's input lies in its buffer: for in-place allgather, this rank's block of recv.
  BenchBuffer& input_buffer(bool in_place) { return in_place ? buf_.recv : buf_.send; }
  size_t input_offset(size_t count, bool in_place) const {
    return in_place && o_.coll == Collective::kAllgather ? rank_ * count * es_ : 0;
  }
  void* input(size_t count, bool in_place) {
    return static_cast<uint8_t*>(input_buffer(in_place).data()) + input_offset(count, in_place);
  }

  // Writes the inputs on the host side and copies them where the collective reads them.
  Status prepare(size_t count, bool in_place) {
    BenchBuffer& b = input_buffer(in_place);
    const size_t offset = input_offset(count, in_place);
    void* in = static_cast<uint8_t*>(b.host()) + offset;
    for (size_t i = 0; i < count; ++i) {
      const bool broadcast_non_root = o_.coll == Collective::kBroadcast && rank_ != o_.root;
      store_element(o_.type, in, i, broadcast_non_root ? 99 : pattern(rank_, i));
    }
    EC_RETURN_IF_ERROR(b.upload(offset, count * es_));
    if (!in_place && o_.coll == Collective::kBroadcast) {
      std::memcpy(buf_.recv.host(), in, count * es_);
      EC_RETURN_IF_ERROR(buf_.recv.upload(0, count * es_));
    }
    return Status::Ok();
  }

  Status call(size_t count, bool in_place) {
    void* in = input(count, in_place);
    switch (o_.coll) {
      case Collective::kAllreduce:
        return comm_.allreduce(in, buf_.r(), count, o_.type, o_.op);
      case Collective::kBroadcast:
        return comm_.broadcast(buf_.r(), count, o_.type, o_.root);
      case Collective::kAllgather:
        return comm_.allgather(in, buf_.r(), count, o_.type);
      case Collective::kBarrier:
        return comm_.barrier();
    }
    return Status(StatusCode::kInternal, "unknown collective");
  }

  Result<uint64_t> count_wrong(size_t count) {
    const size_t result_elems = o_.coll == Collective::kAllgather ? count * P_ : count;
    EC_RETURN_IF_ERROR(buf_.recv.download(result_elems * es_));
    const void* result = buf_.recv.host();
    uint64_t wrong = 0;
    switch (o_.coll) {
      case Collective::kAllreduce:
        for (size_t i = 0; i < count; ++i) {
          wrong += load_element(o_.type, result, i) != reduce_expected(o_.op, P_, i);
        }
        break;
      case Collective::kBroadcast:
        for (size_t i = 0; i < count; ++i)
          wrong += load_element(o_.type, result, i) != pattern(o_.root, i);
        break;
      case Collective::kAllgather:
        for (int g = 0; g < P_; ++g) {
          for (size_t i = 0; i < count; ++i) {
            wrong += load_element(o_.type, result, g * count + i) != pattern(g, i);
          }
        }
        break;
      case Collective::kBarrier:
        break;
    }
    return wrong;
  }

  // Times warm-up + iters back-to-back calls (inputs prepared once, as nccl-tests does: an
  // in-place input is overwritten by each call, which changes the values, not the work), then
  // checks one more call on freshly prepared inputs.
  Result<Timing> measure(size_t count, bool in_place) {
    std::vector<double> us;
    EC_RETURN_IF_ERROR(prepare(count, in_place));
    for (int it = 0; it < o_.warmup + o_.iters; ++it) {
      EC_RETURN_IF_ERROR(comm_.barrier());
      const auto t0 = Clock::now();
      EC_RETURN_IF_ERROR(call(count, in_place));
      const auto t1 = Clock::now();
      if (it >= o_.warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    uint64_t wrong = 0;
    if (o_.check) {
      EC_RETURN_IF_ERROR(prepare(count, in_place));
      EC_RETURN_IF_ERROR(comm_.barrier());
      EC_RETURN_IF_ERROR(call(count, in_place));
      EC_ASSIGN_OR_RETURN(wrong, count_wrong(count));
    }
    // The slowest rank's time for each iteration, and the wrong elements of all ranks.
    EC_RETURN_IF_ERROR(
        comm_.allreduce(us.data(), us.data(), us.size(), DataType::kFloat64, ReduceOp::kMax));
    int64_t total_wrong = static_cast<int64_t>(wrong);
    EC_RETURN_IF_ERROR(
        comm_.allreduce(&total_wrong, &total_wrong, 1, DataType::kInt64, ReduceOp::kSum));
    Timing t;
    for (double x : us) t.mean_us += x / us.size();
    std::sort(us.begin(), us.end());
    t.median_us = us[us.size() / 2];
    t.p99_us = us[std::min(us.size() - 1, static_cast<size_t>(us.size() * 0.99))];
    t.wrong = static_cast<uint64_t>(total_wrong);
    return t;
  }

  Communicator& comm_;
  const Options& o_;
  const int P_;
  const int rank_;
  const size_t es_;
  Buffers buf_;
};

}  // namespace

double pattern(int rank, size_t i) { return static_cast<double>((i + rank * 7) % 13) - 6.0; }

double reduce_expected(ReduceOp op, int ranks, size_t i) {
  double acc = pattern(0, i);
  for (int r = 1; r < ranks; ++r) {
    const double v = pattern(r, i);
    acc = op == ReduceOp::kSum   ? acc + v
          : op == ReduceOp::kMin ? std::min(acc, v)
                                 : std::max(acc, v);
  }
  return acc;
}

Result<std::vector<Row>> run_collective(Communicator& comm, const Options& options) {
  return Runner(comm, options).run();
}

double busbw_factor(Collective coll, int ranks) {
  switch (coll) {
    case Collective::kAllreduce:
      return 2.0 * (ranks - 1) / ranks;
    case Collective::kAllgather:
      return static_cast<double>(ranks - 1) / ranks;
    case Collective::kBroadcast:
      return 1.0;
    case Collective::kBarrier:
      return 0.0;
  }
  return 0.0;
}

std::vector<double> memcpy_gbps_samples(size_t bytes, int reps) {
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  std::vector<double> out;
  for (int i = 0; i < reps + 2; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const auto t1 = Clock::now();
    // Touch the destination so the copy cannot be elided.
    a[i % bytes] = b[(i * 7919) % bytes];
    if (i >= 2)
      out.push_back(static_cast<double>(bytes) / std::chrono::duration<double>(t1 - t0).count() /
                    1e9);
  }
  return out;
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace eagercomm::bench
