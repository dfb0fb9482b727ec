// Command-line options of eagercomm-bench (nccl-tests conventions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "runtime/status.h"

namespace eagercomm::bench {

enum class Collective { kAllreduce, kBroadcast, kAllgather, kBarrier };

// Who sleeps how long before each iteration of the imbalance benchmark (the paper's patterns).
enum class DelayPattern {
  kFixed,   // the last K ranks sleep D ms every iteration
  kRandom,  // K ranks drawn by a shared PRNG each iteration sleep D ms
  kLinear,  // rank r sleeps D * r / (P - 1) ms (the paper's "rank r sleeps r ms" for D = P - 1)
  kExp,     // K ranks drawn each iteration sleep an exponentially distributed time, mean D ms
};

// Where the ranks come from (--world).
enum class WorldKind {
  kAuto,     // mpi under mpirun when built with MPI, env under another launcher, else threads
  kThreads,  // --ranks threads of this process
  kEnv,      // processes started by eagercomm-run, torchrun, srun, ... (Communicator::from_env)
  kMpi,      // processes started by mpirun, bootstrapped through MPI (communicator_from_mpi)
};

// Where the collective benchmarks keep their send/recv buffers (--device).
enum class BufferDevice { kHost, kCuda };

const char* device_name(BufferDevice d);

struct Options {
  Collective coll = Collective::kAllreduce;
  size_t min_bytes = 8;                // -b
  size_t max_bytes = 64 << 20;         // -e
  double factor = 2;                   // -f
  int iters = 20;                      // -n
  int warmup = 5;                      // -w
  bool check = true;                   // -c
  DataType type = DataType::kFloat32;  // -d
  ReduceOp op = ReduceOp::kSum;        // -o
  int root = 0;                        // -r
  int ranks = 4;                       // -p / --ranks: in-process ranks
  bool ranks_given = false;
  WorldKind world = WorldKind::kAuto;         // --world
  std::vector<std::string> compare;           // --compare mpi,gloo,nccl: baselines run alongside
  BufferDevice device = BufferDevice::kHost;  // --device host|cuda
  bool p2p = false;                           // --p2p: transport write+notify latency / bandwidth
  int window = 64;       // --window: writes in flight in the p2p bandwidth test
  bool consume = false;  // --consume: p2p receiver reads each payload
  bool in_place = true;  // -I 0 skips the in-place columns
  std::string json;      // --json FILE ("-": stdout instead of the table)

  // --imbalance: partial collectives against the full allreduce under injected delays.
  bool imbalance = false;
  std::vector<double> delays_ms = {20};  // --delay-ms D[,D...]
  int delayed = 1;                       // --delayed K
  double compute_ms = 0;                 // --compute-ms C: every rank's sleep per iteration
  DelayPattern pattern = DelayPattern::kFixed;
  std::vector<std::string> modes = {"full", "solo", "majority", "quorum"};  // --modes
  uint64_t seed = 1;                                                        // --seed
  uint32_t result_depth = 16;  // --result-depth (partial allreduce option)
};

const char* pattern_name(DelayPattern p);

const char* collective_name(Collective c);

// Parses argv; on error the Status says which flag and why. `help` is set for -h.
Result<Options> parse_options(int argc, char** argv, bool* help);
// Checks what depends on the number of ranks (known only once the world exists).
Status check_for_ranks(const Options& o, int ranks);
void print_usage();

}  // namespace eagercomm::bench
