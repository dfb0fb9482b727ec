// Internal: the queue-pair attributes eagercomm chooses, the same on both connection paths
// (issue 18, defects 9 and 10). Not installed.
//
// The store path builds its RTR and RTS attributes itself; the cm path takes rdma_init_qp_attr()'s
// (the path record's MTU, SL and P_Key, the PSNs the CM exchanged) and must override what the CM
// gets wrong for us: min_rnr_timer 0 (655 ms per RNR retry), and timeouts that differ from the
// store path's. apply_qp_settings() is the one place that decides.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>

#include "transport/verbs/verbs_config.h"

namespace eagercomm::verbs {

struct QpSettings {
  uint8_t timeout = 18;                  // 4.096 us x 2^timeout per try
  uint8_t retry_cnt = 7;                 // then IBV_WC_RETRY_EXC_ERR: the peer is reported lost
  uint8_t rnr_retry = 7;                 // 7: forever (credits keep receives posted; a safety net)
  uint8_t min_rnr_timer = 12;            // 0.64 ms before a requester retries after an RNR NAK
  std::optional<uint8_t> sl;             // unset: the path's (cm) or 0 (store)
  std::optional<uint8_t> traffic_class;  // unset: rdma_cm's (cm) or 0 (store)
  std::optional<ibv_mtu> max_mtu;        // unset: the ports' (store) or the path record's (cm)
};

// From EAGERCOMM_IB_TIMEOUT / _RETRY_CNT / _SL / _TC / _MTU (validated by the config table).
QpSettings qp_settings(const VerbsConfig& config);

// Sets ours on `attr` for the transition to attr.qp_state and adds what it set to `mask`: the
// access flags (INIT), min_rnr_timer, the SL / traffic class when given and the path MTU capped
// by max_mtu (RTR, whose path_mtu the caller set first), timeout,
// retry_cnt and rnr_retry (RTS). Attributes of other states are left alone.
void apply_qp_settings(const QpSettings& s, ibv_qp_attr& attr, int& mask);

// The access eagercomm's queue pairs grant: peers write into registered memory, nothing else.
inline constexpr int kQpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

}  // namespace eagercomm::verbs
