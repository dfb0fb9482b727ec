#include "bench/bench_compare.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <functional>

#include "bench/bench_collective.h"
#include "bench/bench_memory.h"
#include "collectives/kernels/element_value.h"

namespace eagercomm::bench {
namespace {

using Clock = std::chrono::steady_clock;
using AllreduceFn = std::function<Status(const void*, void*, size_t, DataType, ReduceOp)>;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// The common start line and the merge of the ranks' times: MPI's when the job is MPI's (the
// baselines mpi and gloo run there), else eagercomm's own (nccl under eagercomm-run).
Status start_line(Communicator& comm, bool mpi) { return mpi ? mpi_barrier() : comm.barrier(); }

Status merge_doubles(Communicator& comm, bool mpi, double* values, size_t count, bool max) {
  if (mpi) return mpi_allreduce_doubles(values, count, max);
  return comm.allreduce(values, values, count, DataType::kFloat64,
                        max ? ReduceOp::kMax : ReduceOp::kSum);
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof(b), f, x);
  return b;
}

}  // namespace

Result<std::vector<CompareRow>> run_compare(Communicator& comm, const Options& o,
                                            const std::vector<Baseline>& baselines, bool mpi) {
  const int P = comm.size(), rank = comm.rank();
  const size_t es = dtype_size(o.type);
  std::vector<AllreduceFn> libs;
  libs.push_back([&comm](const void* s, void* r, size_t n, DataType t, ReduceOp op) {
    return comm.allreduce(s, r, n, t, op);
  });
  for (const Baseline& b : baselines) libs.push_back(b.allreduce);
  const size_t L = libs.size();

  std::vector<size_t> counts;
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes);
       b *= o.factor) {
    const size_t n = static_cast<size_t>(b) / es;
    if (n > 0 && (counts.empty() || counts.back() != n)) counts.push_back(n);
  }
  const size_t max_count = counts.empty() ? 0 : counts.back();
  // The same two buffers serve every library, in host or device memory (--device).
  EC_ASSIGN_OR_RETURN(BenchBuffer send_buf, BenchBuffer::allocate(o.device, max_count * es));
  EC_ASSIGN_OR_RETURN(BenchBuffer recv_buf, BenchBuffer::allocate(o.device, max_count * es));
  void* send = send_buf.data();
  void* recv = recv_buf.data();
  for (size_t i = 0; i < max_count; ++i) {
    store_element(o.type, send_buf.host(), i, pattern(rank, i));
  }
  EC_RETURN_IF_ERROR(send_buf.upload(0, max_count * es));

  std::vector<CompareRow> rows;
  for (size_t count : counts) {
    std::vector<std::vector<double>> us(L);
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      for (size_t k = 0; k < L; ++k) {
        // Every other iteration in reverse order, so no library always runs first after the
        // other's barrier (on oversubscribed cores the position changed times by up to 1.5x).
        const size_t l = it % 2 ? L - 1 - k : k;
        EC_RETURN_IF_ERROR(start_line(comm, mpi));
        const auto t0 = Clock::now();
        EC_RETURN_IF_ERROR(libs[l](send, recv, count, o.type, o.op));
        const auto t1 = Clock::now();
        if (it >= o.warmup)
          us[l].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    }
    CompareRow row;
    row.bytes = count * es;
    row.count = count;
    for (size_t l = 0; l < L; ++l) {
      CompareCell cell;
      if (o.check) {
        EC_RETURN_IF_ERROR(recv_buf.clear());
        EC_RETURN_IF_ERROR(start_line(comm, mpi));
        EC_RETURN_IF_ERROR(libs[l](send, recv, count, o.type, o.op));
        EC_RETURN_IF_ERROR(recv_buf.download(count * es));
        double wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          wrong += load_element(o.type, recv_buf.host(), i) != reduce_expected(o.op, P, i);
        }
        EC_RETURN_IF_ERROR(merge_doubles(comm, mpi, &wrong, 1, false));
        cell.wrong = static_cast<uint64_t>(wrong);
      }
      EC_RETURN_IF_ERROR(merge_doubles(comm, mpi, us[l].data(), us[l].size(), true));
      cell.median_us = percentile(us[l], 0.5);
      cell.p99_us = percentile(us[l], 0.99);
      row.cells.push_back(cell);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

void print_compare(FILE* out, const Options& o, int ranks, const std::string& transport,
                   const std::vector<Baseline>& baselines, const std::vector<CompareRow>& rows) {
  std::fprintf(out,
               "# eagercomm-bench --compare: allreduce, %d processes, eagercomm transport %s, "
               "%s %s, %s buffers\n",
               ranks, transport.c_str(), std::string(dtype_name(o.type)).c_str(),
               std::string(reduce_op_name(o.op)).c_str(), device_name(o.device));
  for (const Baseline& b : baselines) {
    std::fprintf(out, "# %-5s %s\n", b.name.c_str(), b.description.c_str());
  }
  std::fprintf(out,
               "# iterations %d (warm-up %d); each iteration runs every library in turn "
               "from a barrier;\n# time = median over iterations of the slowest rank; "
               "ratio = eagercomm / library (< 1: eagercomm faster)\n#\n",
               o.iters, o.warmup);
  std::fprintf(out, "#%11s %11s %11s", "size", "count", "eagercomm");
  for (const Baseline& b : baselines) std::fprintf(out, " %11s %9s", b.name.c_str(), "ratio");
  std::fprintf(out, " %6s\n#%11s %11s %11s", "#wrong", "(B)", "(elements)", "(us)");
  for (size_t i = 0; i < baselines.size(); ++i) std::fprintf(out, " %11s %9s", "(us)", "");
  std::fprintf(out, "\n");
  uint64_t wrong_total = 0;
  std::vector<double> worst(baselines.size(), 0);
  for (const CompareRow& r : rows) {
    std::fprintf(out, " %11zu %11zu %11.2f", r.bytes, r.count, r.cells[0].median_us);
    uint64_t wrong = 0;
    for (size_t l = 0; l < r.cells.size(); ++l) wrong += r.cells[l].wrong;
    for (size_t l = 1; l < r.cells.size(); ++l) {
      const double ratio = r.cells[0].median_us / r.cells[l].median_us;
      worst[l - 1] = std::max(worst[l - 1], ratio);
      std::fprintf(out, " %11.2f %9.2f", r.cells[l].median_us, ratio);
    }
    std::fprintf(out, " %6" PRIu64 "\n", wrong);
    wrong_total += wrong;
  }
  std::fprintf(out, "# Out of bounds values : %" PRIu64 " %s\n", wrong_total,
               wrong_total ? "FAILED" : "OK");
  for (size_t l = 0; l < baselines.size(); ++l) {
    std::fprintf(out, "# Largest eagercomm / %s ratio over sizes: %.2f\n",
                 baselines[l].name.c_str(), worst[l]);
  }
}

std::string compare_json(const Options& o, int ranks, const std::string& transport,
                         const std::vector<Baseline>& baselines,
                         const std::vector<CompareRow>& rows) {
  std::string s = "{\n  \"benchmark\": \"eagercomm-bench --compare\",\n";
  s += "  \"ranks\": " + std::to_string(ranks) + ",\n";
  s += "  \"transport\": \"" + transport + "\",\n";
  s += "  \"type\": \"" + std::string(dtype_name(o.type)) + "\",\n";
  s += "  \"device\": \"" + std::string(device_name(o.device)) + "\",\n";
  s += "  \"iters\": " + std::to_string(o.iters) + ",\n  \"libraries\": [\"eagercomm\"";
  for (const Baseline& b : baselines) s += ", \"" + b.name + "\"";
  s += "],\n  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const CompareRow& r = rows[i];
    s += i ? ",\n    " : "\n    ";
    s += "{\"bytes\": " + std::to_string(r.bytes) + ", \"count\": " + std::to_string(r.count);
    for (size_t l = 0; l < r.cells.size(); ++l) {
      const std::string name = l == 0 ? "eagercomm" : baselines[l - 1].name;
      s += ", \"" + name + "\": {\"time_us\": " + fmt("%.3f", r.cells[l].median_us) +
           ", \"p99_us\": " + fmt("%.3f", r.cells[l].p99_us) +
           ", \"wrong\": " + std::to_string(r.cells[l].wrong);
      if (l > 0) s += ", \"ratio\": " + fmt("%.4f", r.cells[0].median_us / r.cells[l].median_us);
      s += "}";
    }
    s += "}";
  }
  s += "\n  ]\n}\n";
  return s;
}

}  // namespace eagercomm::bench
