#include "bench/bench_compare.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <functional>

#include "bench/bench_collective.h"
#include "collectives/element_value.h"

namespace eagercomm::bench {
namespace {

using Clock = std::chrono::steady_clock;
using AllreduceFn = std::function<Status(const void*, void*, size_t, DataType, ReduceOp)>;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof(b), f, x);
  return b;
}

}  // namespace

Result<std::vector<CompareRow>> run_compare(Communicator& comm, const Options& o,
                                            const std::vector<Baseline>& baselines) {
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
  // The same two buffers serve every library (8-byte aligned storage).
  std::vector<uint64_t> send_store(max_count * es / 8 + 8), recv_store(max_count * es / 8 + 8);
  void* send = send_store.data();
  void* recv = recv_store.data();
  for (size_t i = 0; i < max_count; ++i) store_element(o.type, send, i, pattern(rank, i));

  std::vector<CompareRow> rows;
  for (size_t count : counts) {
    std::vector<std::vector<double>> us(L);
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      for (size_t k = 0; k < L; ++k) {
        // Every other iteration in reverse order, so no library always runs first after the
        // other's barrier (on oversubscribed cores the position changed times by up to 1.5x).
        const size_t l = it % 2 ? L - 1 - k : k;
        EC_RETURN_IF_ERROR(mpi_barrier());
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
        std::fill(recv_store.begin(), recv_store.end(), 0);
        EC_RETURN_IF_ERROR(mpi_barrier());
        EC_RETURN_IF_ERROR(libs[l](send, recv, count, o.type, o.op));
        double wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          wrong += load_element(o.type, recv, i) != reduce_expected(o.op, P, i);
        }
        EC_RETURN_IF_ERROR(mpi_allreduce_doubles(&wrong, 1, false));
        cell.wrong = static_cast<uint64_t>(wrong);
      }
      EC_RETURN_IF_ERROR(mpi_allreduce_doubles(us[l].data(), us[l].size(), true));
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
               "%s %s\n",
               ranks, transport.c_str(), std::string(dtype_name(o.type)).c_str(),
               std::string(reduce_op_name(o.op)).c_str());
  for (const Baseline& b : baselines) {
    std::fprintf(out, "# %-5s %s\n", b.name.c_str(), b.description.c_str());
  }
  std::fprintf(out,
               "# iterations %d (warm-up %d); each iteration runs every library in turn "
               "from an MPI_Barrier;\n# time = median over iterations of the slowest rank; "
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
