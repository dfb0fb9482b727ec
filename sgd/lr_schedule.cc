#include "sgd/lr_schedule.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace eagercomm::sgd {

double LrSchedule::at(uint64_t round) const {
  double rate = base;
  if (round < warmup_rounds) {
    const double progress = static_cast<double>(round) / static_cast<double>(warmup_rounds);
    rate *= warmup_start + (1.0 - warmup_start) * progress;
  }
  for (uint64_t m : milestones) {
    if (round >= m) rate *= gamma;
  }
  return rate;
}

Status LrSchedule::validate() const {
  if (!(base > 0) || !std::isfinite(base)) {
    return make_status(StatusCode::kInvalidArgument,
                       "learning rate: base rate %g must be positive and finite", base);
  }
  if (!(warmup_start > 0 && warmup_start <= 1)) {
    return make_status(StatusCode::kInvalidArgument,
                       "learning rate: warm-up start factor %g must be in (0, 1]", warmup_start);
  }
  if (!(gamma > 0 && gamma <= 1)) {
    return make_status(StatusCode::kInvalidArgument,
                       "learning rate: decay factor gamma %g must be in (0, 1]", gamma);
  }
  for (size_t i = 1; i < milestones.size(); ++i) {
    if (milestones[i] <= milestones[i - 1]) {
      return make_status(StatusCode::kInvalidArgument,
                         "learning rate: milestones must be strictly ascending (%llu after %llu)",
                         static_cast<unsigned long long>(milestones[i]),
                         static_cast<unsigned long long>(milestones[i - 1]));
    }
  }
  return Status::Ok();
}

std::string LrSchedule::describe() const {
  char text[128];
  std::snprintf(text, sizeof(text), "%g", base);
  std::string out = text;
  if (warmup_rounds) {
    std::snprintf(text, sizeof(text), ", warm-up %llu rounds from %gx",
                  static_cast<unsigned long long>(warmup_rounds), warmup_start);
    out += text;
  }
  if (!milestones.empty()) {
    std::snprintf(text, sizeof(text), ", x%g at rounds", gamma);
    out += text;
    for (uint64_t m : milestones) out += " " + std::to_string(m);
  }
  return out;
}

Result<std::vector<uint64_t>> parse_milestones(const std::string& text) {
  std::vector<uint64_t> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    char* stop = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(item.c_str(), &stop, 10);
    if (item.empty() || item[0] == '-' || errno != 0 || *stop != '\0') {
      return make_status(StatusCode::kInvalidArgument,
                         "learning rate milestones '%s': '%s' is not a round number", text.c_str(),
                         item.c_str());
    }
    out.push_back(value);
    at = end + 1;
  }
  return out;
}

}  // namespace eagercomm::sgd
