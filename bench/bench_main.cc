// eagercomm-bench: nccl-tests style collective benchmark. Ranks are threads of this process
// (--ranks) or processes of a job (eagercomm-run, mpirun, srun, torchrun); the same measurement
// code runs on every rank either way, and one process prints the report.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "bench/baselines.h"
#include "bench/bench_collective.h"
#include "bench/bench_compare.h"
#include "bench/bench_imbalance.h"
#include "bench/bench_memory.h"
#include "bench/bench_p2p.h"
#include "bench/bench_report.h"
#include "bench/bench_world.h"
#include "collectives/kernels/reduce_kernels.h"

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

int fail(const Status& s) {
  std::fprintf(stderr, "eagercomm-bench: %s\n", s.to_string().c_str());
  return 1;
}

int run_p2p_mode(const Options& o) {
  Result<P2pReport> report = run_p2p(o);
  if (!report.ok()) return fail(report.status());
  if (!report.value().reports) return 0;
  if (o.json != "-") print_p2p(stdout, o, report.value());
  return write_json(o.json, p2p_json(o, report.value())) ? 0 : 1;
}

int run_imbalance_mode(World& world, const Options& o, const std::string& transport,
                       const std::vector<Baseline>& baselines) {
  auto rows = world.run<std::vector<ImbalanceRow>>(
      [&](Communicator& c) { return run_imbalance(c, o, baselines); });
  if (!rows) return 1;
  if (!world.reports()) return 0;
  if (o.json != "-") print_imbalance(stdout, o, world.size(), transport, *rows, baselines);
  return write_json(o.json, imbalance_json(o, world.size(), transport, *rows)) ? 0 : 1;
}

int run_compare_mode(World& world, const Options& o, const std::string& transport,
                     const std::vector<Baseline>& baselines) {
  auto rows = world.run<std::vector<CompareRow>>([&](Communicator& c) {
    return run_compare(c, o, baselines, world.kind() == WorldKind::kMpi);
  });
  if (!rows) return 1;
  uint64_t wrong = 0;
  for (const CompareRow& r : *rows) {
    for (const CompareCell& c : r.cells) wrong += c.wrong;
  }
  if (world.reports()) {
    if (o.json != "-") print_compare(stdout, o, world.size(), transport, baselines, *rows);
    if (!write_json(o.json, compare_json(o, world.size(), transport, baselines, *rows))) return 1;
  }
  return wrong ? 3 : 0;
}

int run_collective_mode(World& world, const Options& o, const std::string& transport) {
  RunInfo info;
  info.options = o;
  info.ranks = world.size();
  info.kernels = reduce_kernels_isa();
  info.transport = transport;
  const size_t memcpy_bytes = std::max<size_t>(o.max_bytes, 1 << 20);
  std::vector<double> memcpy_samples = memcpy_gbps_samples(memcpy_bytes, 15);
  auto rows = world.run<std::vector<Row>>([&](Communicator& c) { return run_collective(c, o); });
  if (!rows) return 1;
  for (double x : memcpy_gbps_samples(memcpy_bytes, 15)) memcpy_samples.push_back(x);
  info.memcpy_gbps = median(memcpy_samples);
  uint64_t wrong = 0;
  for (const Row& row : *rows) wrong += row.out_of_place.wrong + row.in_place.wrong;
  if (world.reports()) {
    if (o.json != "-") print_table(stdout, info, *rows);
    if (!write_json(o.json, to_json(info, *rows))) return 1;
  }
  return wrong ? 3 : 0;
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
  if (o.p2p) return run_p2p_mode(o);
  // Before joining a job: every rank of a GPU-less job says why, instead of failing later on an
  // allocation.
  if (Status s = check_device_available(o.device); !s.ok()) return fail(s);

  Result<std::unique_ptr<World>> created = World::create(o, &argc, &argv);
  if (!created.ok()) return fail(created.status());
  World& world = *created.value();
  if (Status s = check_for_ranks(o, world.size()); !s.ok()) {
    std::fprintf(stderr, "eagercomm-bench: %s\n", s.message().c_str());
    return 2;
  }
  if (world.comms().size() > 1 &&
      std::find(o.compare.begin(), o.compare.end(), "nccl") != o.compare.end()) {
    std::fprintf(stderr,
                 "eagercomm-bench: --compare nccl needs one process per rank: start it with "
                 "eagercomm-run -n N or mpirun\n");
    return 2;
  }
  const std::string transport = world.comms().front()->transport_name();
  std::vector<Baseline> baselines;
  if (!o.compare.empty()) {
    Result<std::vector<Baseline>> made = make_baselines(o.compare, *world.comms().front());
    if (!made.ok()) return fail(made.status());
    baselines = std::move(made).value();
  }
  if (o.imbalance) return run_imbalance_mode(world, o, transport, baselines);
  if (!baselines.empty()) return run_compare_mode(world, o, transport, baselines);
  return run_collective_mode(world, o, transport);
}
