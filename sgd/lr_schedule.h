// Learning-rate schedule of EagerSgd: linear warm-up, then step decay.
//
// It is a function of the round number, not of a rank's local step: every rank applies round r
// with the same rate, which keeps the replicas bit-identical whatever each rank's pace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::sgd {

struct LrSchedule {
  double base = 0.01;
  // Rounds 0 .. warmup_rounds - 1 ramp linearly from base * warmup_start to base.
  uint64_t warmup_rounds = 0;
  double warmup_start = 0.1;
  // At each milestone round (ascending) the rate is multiplied by gamma.
  std::vector<uint64_t> milestones;
  double gamma = 0.1;

  // The rate of round `round`.
  double at(uint64_t round) const;
  // Errors name the field: base > 0, 0 < warmup_start <= 1, milestones strictly ascending,
  // 0 < gamma <= 1.
  Status validate() const;
  // "0.05, warm-up 100 rounds from 0.1x, x0.1 at rounds 3000 6000".
  std::string describe() const;
};

// Parses "R1,R2,..." (milestone rounds) for command lines; an empty string is no milestones.
Result<std::vector<uint64_t>> parse_milestones(const std::string& text);

}  // namespace eagercomm::sgd
