// The verbs transport's part of the EAGERCOMM_* table: which RDMA device and port, how queue
// pairs connect, their timeouts and path settings, and the emulated device for tests.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/config_table.h"
#include "runtime/status.h"

namespace eagercomm {

// How the verbs transport connects its queue pairs (transport/verbs/verbs_connect.h).
enum class IbConnectMode : uint8_t { kAuto, kCm, kStore };
// The largest path MTU of the verbs queue pairs: k256 + n is 256 << n bytes.
enum class IbMtu : uint8_t { kAuto, k256, k512, k1024, k2048, k4096 };

struct VerbsConfig {
  // The verbs transport's device: name ("" any), port (0 first active), GID index (kAutoIndex).
  static constexpr uint32_t kAutoIndex = UINT32_MAX;
  std::string ib_hca;
  uint32_t ib_port = 0;
  uint32_t ib_gid_index = kAutoIndex;
  IbConnectMode ib_connect = IbConnectMode::kAuto;  // rdma_cm, or QP numbers via the store
  // Queue-pair transport settings, on both connection paths (IB encodings; kAutoIndex: the
  // path's own SL / traffic class on the cm path, 0 on the store path).
  uint32_t ib_timeout = 18;
  uint32_t ib_retry_cnt = 7;
  uint32_t ib_sl = kAutoIndex;
  uint32_t ib_tc = kAutoIndex;
  IbMtu ib_mtu = IbMtu::kAuto;  // auto: the ports' (store path) or the path record's (cm)
  bool verbs_emulate = false;   // the verbs transport runs on the emulated device (tests)

  // Only these rows, from this process's environment (the registry asks whether the emulated
  // device is on without loading the whole table).
  static Result<VerbsConfig> from_environ();
};

std::span<const ConfigRow> verbs_config_rows();

}  // namespace eagercomm
