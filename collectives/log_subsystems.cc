// The catalogue of log subsystems: every layer's, the training layer's and the benchmarks'
// (header-only declarations), so that any program checks EAGERCOMM_LOG_SUBSYS against all of
// them. Built at compile time: two subsystems with one id, or a gap, do not compile.
#include <array>

#include "bench/bench_log.h"
#include "collectives/collective_log.h"
#include "sgd/sgd_log.h"
#include "transport/transport_log.h"

namespace eagercomm {
namespace {

struct Catalogue {
  std::array<const char*, kLogSubsysCapacity> names{};
  int count = 0;
  bool valid = true;  // ids unique and dense from 0
};

template <size_t... N>
constexpr Catalogue make_catalogue(const LogSubsysName (&... lists)[N]) {
  Catalogue c;
  const auto add = [&c](const LogSubsysName& entry) {
    const auto id = static_cast<size_t>(entry.id);
    if (id >= c.names.size() || c.names[id] != nullptr) {
      c.valid = false;
      return;
    }
    c.names[id] = entry.name;
  };
  (..., [&] {
    for (const LogSubsysName& entry : lists) add(entry);
  }());
  while (c.count < kLogSubsysCapacity && c.names[static_cast<size_t>(c.count)] != nullptr)
    ++c.count;
  for (size_t i = static_cast<size_t>(c.count); i < c.names.size(); ++i) {
    if (c.names[i] != nullptr) c.valid = false;
  }
  return c;
}

constexpr Catalogue kCatalogue =
    make_catalogue(kRuntimeLogSubsystems, kTransportLogSubsystems, kCollectiveLogSubsystems,
                   kSgdLogSubsystems, kBenchLogSubsystems);
static_assert(kCatalogue.valid, "two log subsystems share an id, or the ids have a gap");

}  // namespace

extern const int kLogSubsysCount = kCatalogue.count;
extern const uint32_t kLogAllSubsys = kCatalogue.count >= 32 ? ~0u : (1u << kCatalogue.count) - 1;

namespace log_detail {
extern const std::array<const char*, kLogSubsysCapacity> kSubsysNames = kCatalogue.names;
}  // namespace log_detail

}  // namespace eagercomm
