// The transport layer's rows of the EAGERCOMM_* table (transport/transport_config.h).
#include "transport/transport_config.h"

namespace eagercomm {
namespace {

using namespace config_units;

constexpr std::string_view kTransportNames[] = {"auto", "inproc", "shm", "ucx", "verbs", "sim"};

constexpr ConfigRow kSelectionRows[] = {
    {.name = "EAGERCOMM_TRANSPORT",
     .kind = ConfigKind::kEnum,
     .default_text = "auto",
     .choices = kTransportNames,
     .doc = "transport between ranks; auto picks the best one available, set one to force a "
            "path when comparing transports or debugging",
     .field = config_field<&TransportConfig::transport>()},
};

constexpr ConfigRow kMailboxRows[] = {
    {.name = "EAGERCOMM_SLOT_BYTES",
     .kind = ConfigKind::kSize,
     .default_text = "256KiB",
     .min = 4 * kKiB,
     .max = 64 * kMiB,
     .doc = "size of one mailbox slot, header included; bigger slots move large messages in "
            "fewer pieces, smaller ones use less memory per peer",
     .field = config_field<&TransportConfig::slot_bytes>()},
    {.name = "EAGERCOMM_SLOTS",
     .kind = ConfigKind::kInt,
     .default_text = "8",
     .min = 2,
     .max = 64,
     .doc = "mailbox slots towards each ring neighbour (half as many towards the other peers "
            "the algorithms send data to; 4 of 1KiB for the rest); more lets more messages be "
            "in flight before a sender waits, at one slot of memory each",
     .field = config_field<&TransportConfig::slots>()},
};

}  // namespace

std::span<const ConfigRow> transport_selection_rows() { return kSelectionRows; }

std::span<const ConfigRow> transport_mailbox_rows() { return kMailboxRows; }

}  // namespace eagercomm
