// eagercomm-bench: nccl-tests style collective benchmark. For now ranks are threads of this
// process (--ranks); every rank runs the same measurement code a process rank will run.
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "bench/bench_collective.h"
#include "bench/bench_imbalance.h"
#include "bench/bench_report.h"
#include "collectives/reduce_kernels.h"

using namespace eagercomm;
using namespace eagercomm::bench;

namespace {

// Writes `doc` to the --json destination ("-": stdout). False when the file can't be written.
bool write_json(const std::string& dest, const std::string& doc) {
  if (dest.empty()) return true;
  if (dest == "-") {
    std::fputs(doc.c_str(), stdout);
    return true;
  }
  FILE* f = std::fopen(dest.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "eagercomm-bench: cannot write %s\n", dest.c_str());
    return false;
  }
  std::fputs(doc.c_str(), f);
  std::fclose(f);
  return true;
}

// Runs fn(rank, comm) on one thread per rank; rank 0's result, or the first rank's error
// (printed).
template <class T, class Fn>
std::optional<T> run_on_ranks(std::vector<std::unique_ptr<Communicator>>& comms, Fn fn) {
  std::vector<Result<T>> results;
  for (size_t r = 0; r < comms.size(); ++r) results.emplace_back(Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = fn(*comms[r]); });
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < comms.size(); ++r) {
    if (!results[r].ok()) {
      std::fprintf(stderr, "eagercomm-bench: rank %zu: %s\n", r,
                   results[r].status().to_string().c_str());
      return std::nullopt;
    }
  }
  return std::move(results[0]).value();
}

}  // namespace

int main(int argc, char** argv) {
  bool help = false;
  Result<Options> parsed = parse_options(argc, argv, &help);
  if (help) {
    print_usage();
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "eagercomm-bench: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const Options& o = parsed.value();
  RunInfo info;
  info.options = o;
  info.ranks = o.ranks;
  info.kernels = reduce_kernels_isa();
  auto world = make_inproc_world(o.ranks);
  if (!world.ok()) {
    std::fprintf(stderr, "eagercomm-bench: %s\n", world.status().to_string().c_str());
    return 1;
  }
  auto& comms = world.value();
  info.transport = comms[0]->transport_name();
  if (o.imbalance) {
    auto rows = run_on_ranks<std::vector<ImbalanceRow>>(
        comms, [&](Communicator& c) { return run_imbalance(c, o); });
    if (!rows) return 1;
    if (o.json != "-") print_imbalance(stdout, o, o.ranks, info.transport, *rows);
    return write_json(o.json, imbalance_json(o, o.ranks, info.transport, *rows)) ? 0 : 1;
  }
  const size_t memcpy_bytes = std::max<size_t>(o.max_bytes, 1 << 20);
  std::vector<double> memcpy_samples = memcpy_gbps_samples(memcpy_bytes, 15);
  auto result = run_on_ranks<std::vector<Row>>(
      comms, [&](Communicator& c) { return run_collective(c, o); });
  if (!result) return 1;
  const std::vector<Row>& rows = *result;
  for (double x : memcpy_gbps_samples(memcpy_bytes, 15)) memcpy_samples.push_back(x);
  info.memcpy_gbps = median(memcpy_samples);
  if (o.json != "-") print_table(stdout, info, rows);
  if (!write_json(o.json, to_json(info, rows))) return 1;
  uint64_t wrong = 0;
  for (const Row& row : rows) wrong += row.out_of_place.wrong + row.in_place.wrong;
  return wrong ? 3 : 0;
}
