// The transport layer's part of the EAGERCOMM_* table: which backend, and the mailbox's slots.
//
// TransportConfig is the configuration as the transport layer sees it: the runtime's rows,
// its backends' (verbs), and its own. The library's Config (collectives/config.h) is one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/config.h"
#include "transport/verbs/verbs_config.h"

namespace eagercomm {

struct TransportConfig : RuntimeConfig, VerbsConfig {
  std::string transport = "auto";  // auto|inproc|shm|ucx|verbs
  size_t slot_bytes = 256 * 1024;  // one mailbox slot, header included
  uint32_t slots = 8;              // mailbox slots per ring neighbour (mailbox_layout.h)
};

// The transport's rows, in two groups that the table lists apart: the backend (first), the
// mailbox (after the runtime's logging and timing rows).
std::span<const ConfigRow> transport_selection_rows();
std::span<const ConfigRow> transport_mailbox_rows();

}  // namespace eagercomm
