#include "bench/bench_report.h"

#include <cinttypes>

namespace eagercomm::bench {
namespace {

double algbw(size_t bytes, double us) { return us > 0 ? bytes / us / 1e3 : 0; }

void cell(FILE* out, const Row& row, const Timing& t, double factor) {
  const double a = algbw(row.bytes, t.median_us);
  std::fprintf(out, " %10.2f %7.2f %7.2f %6" PRIu64, t.median_us, a, a * factor, t.wrong);
}

std::string timing_json(const Row& row, const Timing& t, double factor) {
  char buf[320];
  const double a = algbw(row.bytes, t.median_us);
  std::snprintf(buf, sizeof(buf),
                "{\"time_us\": %.3f, \"p99_us\": %.3f, \"mean_us\": %.3f, \"algbw_gbps\": %.4f, "
                "\"busbw_gbps\": %.4f, \"wrong\": %" PRIu64 "}",
                t.median_us, t.p99_us, t.mean_us, a, a * factor, t.wrong);
  return buf;
}

}  // namespace

void print_table(FILE* out, const RunInfo& info, const std::vector<Row>& rows) {
  const Options& o = info.options;
  const double factor = busbw_factor(o.coll, info.ranks);
  std::fprintf(out,
               "# eagercomm-bench: %s, %d ranks, transport %s, reduction kernels %s, %s buffers\n",
               collective_name(o.coll), info.ranks, info.transport.c_str(), info.kernels.c_str(),
               device_name(o.device));
  std::fprintf(out,
               "# iterations %d (warm-up %d), check %s; time = median over iterations of the "
               "slowest rank\n",
               o.iters, o.warmup, o.check ? "on" : "off");
  std::fprintf(out,
               "# single-thread memcpy bandwidth (reference limit, median of 30 copies "
               "before and after): %.2f GB/s\n#\n",
               info.memcpy_gbps);
  std::fprintf(out, "#%62s%38s\n", "out-of-place", o.in_place ? "in-place" : "");
  std::fprintf(out, "#%11s %13s %6s %6s %10s %7s %7s %6s", "size", "count", "type", "redop", "time",
               "algbw", "busbw", "#wrong");
  if (o.in_place) std::fprintf(out, " %10s %7s %7s %6s", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "\n#%11s %13s %6s %6s %10s %7s %7s %6s", "(B)", "(elements)", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
  if (o.in_place) std::fprintf(out, " %10s %7s %7s %6s", "(us)", "(GB/s)", "(GB/s)", "");
  std::fprintf(out, "\n");
  uint64_t wrong = 0;
  double busbw_sum = 0;
  const bool reduces = o.coll == Collective::kAllreduce;
  for (const Row& row : rows) {
    std::fprintf(out, " %11zu %13zu %6s %6s", row.bytes, row.count,
                 std::string(dtype_name(o.type)).c_str(),
                 reduces ? std::string(reduce_op_name(o.op)).c_str() : "none");
    cell(out, row, row.out_of_place, factor);
    if (o.in_place) cell(out, row, row.in_place, factor);
    std::fprintf(out, "\n");
    wrong += row.out_of_place.wrong + row.in_place.wrong;
    busbw_sum += algbw(row.bytes, row.out_of_place.median_us) * factor;
  }
  std::fprintf(out, "# Out of bounds values : %" PRIu64 " %s\n", wrong, wrong ? "FAILED" : "OK");
  std::fprintf(out, "# Avg bus bandwidth    : %.3f GB/s\n",
               rows.empty() ? 0.0 : busbw_sum / rows.size());
  if (!rows.empty() && factor > 0 && info.memcpy_gbps > 0) {
    const Row& last = rows.back();
    const double bus = algbw(last.bytes, last.out_of_place.median_us) * factor;
    std::fprintf(out, "# Largest size busbw / memcpy bandwidth: %.2f / %.2f = %.0f%%\n", bus,
                 info.memcpy_gbps, 100.0 * bus / info.memcpy_gbps);
  }
}

std::string to_json(const RunInfo& info, const std::vector<Row>& rows) {
  const Options& o = info.options;
  const double factor = busbw_factor(o.coll, info.ranks);
  std::string s = "{\n";
  s += "  \"benchmark\": \"eagercomm-bench\",\n";
  s += "  \"collective\": \"" + std::string(collective_name(o.coll)) + "\",\n";
  s += "  \"ranks\": " + std::to_string(info.ranks) + ",\n";
  s += "  \"transport\": \"" + info.transport + "\",\n";
  s += "  \"kernels\": \"" + info.kernels + "\",\n";
  s += "  \"device\": \"" + std::string(device_name(info.options.device)) + "\",\n";
  s += "  \"type\": \"" + std::string(dtype_name(o.type)) + "\",\n";
  s += "  \"op\": \"" + std::string(reduce_op_name(o.op)) + "\",\n";
  s += "  \"iters\": " + std::to_string(o.iters) + ",\n";
  s += "  \"warmup\": " + std::to_string(o.warmup) + ",\n";
  char mb[64];
  std::snprintf(mb, sizeof(mb), "%.4f", info.memcpy_gbps);
  s += "  \"memcpy_gbps\": " + std::string(mb) + ",\n";
  s += "  \"busbw_factor\": " + std::to_string(factor) + ",\n";
  s += "  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    s += i ? ",\n    " : "\n    ";
    s += "{\"bytes\": " + std::to_string(r.bytes) + ", \"count\": " + std::to_string(r.count) +
         ", \"out_of_place\": " + timing_json(r, r.out_of_place, factor);
    if (o.in_place && o.coll != Collective::kBarrier) {
      s += ", \"in_place\": " + timing_json(r, r.in_place, factor);
    }
    s += "}";
  }
  s += "\n  ]\n}\n";
  return s;
}

}  // namespace eagercomm::bench
