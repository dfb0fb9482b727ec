// The collectives' rows of the EAGERCOMM_* table (collectives/collective_config.h).
#include "collectives/collective_config.h"

namespace eagercomm {
namespace {

using namespace config_units;

constexpr std::string_view kAllreduceAlgoNames[] = {"auto", "rd", "ring", "direct"};
constexpr std::string_view kBroadcastAlgoNames[] = {"auto", "tree", "chain"};

constexpr ConfigRow kCollectiveRows[] = {
    {.name = "EAGERCOMM_ALLREDUCE_ALGO",
     .kind = ConfigKind::kEnum,
     .default_text = "auto",
     .choices = kAllreduceAlgoNames,
     .doc = "allreduce algorithm: rd (recursive doubling, small messages), ring (large ones) or "
            "direct (ranks sharing an address space read each other's buffers); auto chooses by "
            "EAGERCOMM_RD_MAX_BYTES and EAGERCOMM_DIRECT_MIN_BYTES",
     .field = config_field<&CollectiveConfig::allreduce_algo>()},
    {.name = "EAGERCOMM_RD_MAX_BYTES",
     .kind = ConfigKind::kSize,
     .default_text = "16KiB",
     .max = 64 * kMiB,
     .doc = "largest allreduce that auto runs by recursive doubling (ring above it) with up to 8 "
            "ranks, scaled by (2(P-1) - log2 P) / 11 above; tune to the network's "
            "latency/bandwidth crossover",
     .field = config_field<&CollectiveConfig::rd_max_bytes>()},
    {.name = "EAGERCOMM_DIRECT_MIN_BYTES",
     .kind = ConfigKind::kSize,
     .default_text = "16KiB",
     .doc = "smallest allreduce that auto runs directly on peers' buffers when the transport maps "
            "them (inproc); below it recursive doubling's single exchange per step is faster",
     .field = config_field<&CollectiveConfig::direct_min_bytes>()},
    {.name = "EAGERCOMM_SMALL_MAX_BYTES",
     .kind = ConfigKind::kSize,
     .default_text = "8KiB",
     .max = 64 * kKiB,
     .doc = "largest allreduce that auto exchanges through per-pair boxes in mapped memory (shm, "
            "inproc; up to 32 ranks): one cache line per peer, no mailbox or notification; the "
            "same limit lets a partial allreduce's rounds run through boxes of its own; 0 "
            "turns both off. Must be the same on every rank",
     .field = config_field<&CollectiveConfig::small_max_bytes>()},
    {.name = "EAGERCOMM_BCAST_ALGO",
     .kind = ConfigKind::kEnum,
     .default_text = "auto",
     .choices = kBroadcastAlgoNames,
     .doc = "broadcast algorithm: tree (few hops, small messages) or chain (pipelined, large "
            "ones); auto chooses by EAGERCOMM_CHAIN_MIN_BYTES",
     .field = config_field<&CollectiveConfig::bcast_algo>()},
    {.name = "EAGERCOMM_CHAIN_MIN_BYTES",
     .kind = ConfigKind::kSize,
     .default_text = "256KiB",
     .doc = "smallest broadcast that auto sends along a pipelined chain (tree below it); tune "
            "to the network's latency/bandwidth crossover",
     .field = config_field<&CollectiveConfig::chain_min_bytes>()},
    {.name = "EAGERCOMM_DIRECT",
     .kind = ConfigKind::kBool,
     .default_text = "1",
     .doc = "store straight into a peer's mapped memory when the transport offers it; turn off "
            "to force the copy path when chasing a memory bug",
     .field = config_field<&CollectiveConfig::direct>()},
    {.name = "EAGERCOMM_PROBE_AFTER",
     .kind = ConfigKind::kDuration,
     .default_text = "50ms",
     .max = 3600 * kNsPerSecond,
     .doc = "how long a collective waits before it sends its signature to its data partners "
            "(r +- 2^k), so that mismatched calls that exchange no message still fail naming "
            "both (2 log2 P small messages per waiting call, once); raise it where many ranks "
            "share few cores, 0 never probes (such a mismatch then waits for EAGERCOMM_TIMEOUT)",
     .field = config_field<&CollectiveConfig::probe_after>()},
    {.name = "EAGERCOMM_STRAGGLER_REPORT",
     .kind = ConfigKind::kInt,
     .default_text = "0",
     .max = 1u << 30,
     .doc = "every N rounds a partial allreduce takes, rank 0 logs the ranks that were not fresh "
            "in at least half of them, how late their posts landed (rounds, and an estimate in "
            "ms), or that there was none; a warning when it names a rank. 0: no report "
            "(PartialAllreduce::lateness() has the figures either way)",
     .field = config_field<&CollectiveConfig::straggler_report>()},
};

}  // namespace

std::span<const ConfigRow> collective_config_rows() { return kCollectiveRows; }

}  // namespace eagercomm
