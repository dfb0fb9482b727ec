#include "transport/verbs/verbs_qp_settings.h"

namespace eagercomm::verbs {

QpSettings qp_settings(const VerbsConfig& config) {
  QpSettings s;
  s.timeout = static_cast<uint8_t>(config.ib_timeout);
  s.retry_cnt = static_cast<uint8_t>(config.ib_retry_cnt);
  if (config.ib_sl != VerbsConfig::kAutoIndex) s.sl = static_cast<uint8_t>(config.ib_sl);
  if (config.ib_tc != VerbsConfig::kAutoIndex) s.traffic_class = static_cast<uint8_t>(config.ib_tc);
  if (config.ib_mtu != IbMtu::kAuto) {
    // IbMtu::k256 + n and IBV_MTU_256 + n both name 256 << n bytes.
    s.max_mtu = static_cast<ibv_mtu>(IBV_MTU_256 + (static_cast<int>(config.ib_mtu) - 1));
  }
  return s;
}

void apply_qp_settings(const QpSettings& s, ibv_qp_attr& attr, int& mask) {
  switch (attr.qp_state) {
    case IBV_QPS_INIT:
      attr.qp_access_flags = kQpAccess;
      mask |= IBV_QP_ACCESS_FLAGS;
      break;
    case IBV_QPS_RTR:
      attr.min_rnr_timer = s.min_rnr_timer;
      mask |= IBV_QP_MIN_RNR_TIMER;
      // The SL and traffic class live in the address vector, which RTR sets whole.
      if (s.sl) attr.ah_attr.sl = *s.sl;
      if (s.traffic_class && attr.ah_attr.is_global) {
        attr.ah_attr.grh.traffic_class = *s.traffic_class;
      }
      if (s.max_mtu && attr.path_mtu > *s.max_mtu) {
        attr.path_mtu = *s.max_mtu;
        mask |= IBV_QP_PATH_MTU;
      }
      break;
    case IBV_QPS_RTS:
      attr.timeout = s.timeout;
      attr.retry_cnt = s.retry_cnt;
      attr.rnr_retry = s.rnr_retry;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
      break;
    default:
      break;
  }
}

}  // namespace eagercomm::verbs
