// Command-line options of eagercomm-bench (nccl-tests conventions).
#pragma once

#include <cstddef>
#include <string>

#include "collectives/dtype.h"
#include "runtime/status.h"

namespace eagercomm::bench {

enum class Collective { kAllreduce, kBroadcast, kAllgather, kBarrier };

struct Options {
  Collective coll = Collective::kAllreduce;
  size_t min_bytes = 8;         // -b
  size_t max_bytes = 64 << 20;  // -e
  double factor = 2;            // -f
  int iters = 20;               // -n
  int warmup = 5;               // -w
  bool check = true;            // -c
  DataType type = DataType::kFloat32;  // -d
  ReduceOp op = ReduceOp::kSum;        // -o
  int root = 0;                 // -r
  int ranks = 4;                // -p / --ranks: in-process ranks
  bool in_place = true;         // -I 0 skips the in-place columns
  std::string json;             // --json FILE ("-": stdout instead of the table)
};

const char* collective_name(Collective c);

// Parses argv; on error the Status says which flag and why. `help` is set for -h.
Result<Options> parse_options(int argc, char** argv, bool* help);
void print_usage();

}  // namespace eagercomm::bench
