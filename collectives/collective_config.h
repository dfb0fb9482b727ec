// The collectives' part of the EAGERCOMM_* table: algorithm choices and their crossovers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/config_table.h"

namespace eagercomm {

enum class AllreduceAlgo : uint8_t { kAuto, kRecursiveDoubling, kRing, kDirect };
enum class BroadcastAlgo : uint8_t { kAuto, kTree, kChain };

struct CollectiveConfig {
  AllreduceAlgo allreduce_algo = AllreduceAlgo::kAuto;
  size_t rd_max_bytes = 16 * 1024;      // recursive doubling up to this size
  size_t direct_min_bytes = 16 * 1024;  // direct (load/store) allreduce from here
  size_t small_max_bytes = 8 * 1024;    // small-box allreduce up to this (0: off)
  BroadcastAlgo bcast_algo = BroadcastAlgo::kAuto;
  size_t chain_min_bytes = 256 * 1024;  // broadcast by chain from this size
  bool direct = true;                   // store into mapped peer memory if offered
  // A plain collective waiting this long sends its signature to every peer (0: never).
  std::chrono::nanoseconds probe_after = std::chrono::milliseconds(50);
  // Every N rounds a partial allreduce takes, rank 0 logs its persistent stragglers (0: never).
  uint32_t straggler_report = 0;
};

std::span<const ConfigRow> collective_config_rows();

}  // namespace eagercomm
