// eagercomm-bench output: the nccl-tests table and the JSON document.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_collective.h"

namespace eagercomm::bench {

struct RunInfo {
  Options options;
  int ranks = 0;
  std::string transport;
  std::string kernels;
  double memcpy_gbps = 0;
};

void print_table(FILE* out, const RunInfo& info, const std::vector<Row>& rows);
std::string to_json(const RunInfo& info, const std::vector<Row>& rows);

}  // namespace eagercomm::bench
