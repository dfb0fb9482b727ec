// The verbs transport's rows of the EAGERCOMM_* table (transport/verbs/verbs_config.h).
#include "transport/verbs/verbs_config.h"

namespace eagercomm {
namespace {

using namespace config_units;

constexpr std::string_view kIbConnectNames[] = {"auto", "cm", "store"};
constexpr std::string_view kIbMtuNames[] = {"auto", "256", "512", "1024", "2048", "4096"};

constexpr ConfigRow kVerbsRows[] = {
    // The verbs transport's device (issue #6); like NCCL_IB_HCA / UCX_NET_DEVICES.
    {.name = "EAGERCOMM_IB_HCA",
     .kind = ConfigKind::kString,
     .default_text = "",
     .note = "RDMA device name as ibv_devices lists it (mlx5_0); empty: the first with an active "
             "port",
     .doc = "which RDMA device the verbs transport uses; eagercomm-info lists the devices here",
     .field = config_field<&VerbsConfig::ib_hca>()},
    {.name = "EAGERCOMM_IB_PORT",
     .kind = ConfigKind::kInt,
     .default_text = "0",
     .max = 255,
     .doc = "port of EAGERCOMM_IB_HCA (ports count from 1); 0: its first active port",
     .field = config_field<&VerbsConfig::ib_port>()},
    {.name = "EAGERCOMM_IB_GID_INDEX",
     .kind = ConfigKind::kInt,
     .default_text = "auto",
     .max = 255,
     .doc = "GID table index for RoCE (and IB with GRH); auto: the first RoCE v2 IPv4-mapped GID "
            "on Ethernet ports, none on InfiniBand ports",
     .field = config_field<&VerbsConfig::ib_gid_index>(),
     .allows_auto = true},
    {.name = "EAGERCOMM_IB_CONNECT",
     .kind = ConfigKind::kEnum,
     .default_text = "auto",
     .choices = kIbConnectNames,
     .doc = "how verbs queue pairs are connected: cm uses rdma_cm on the IP address of the "
            "device (IPoIB / RoCE), store exchanges QP numbers, LID/GID and PSNs through the "
            "bootstrap store; auto: cm when the device has an IP address and the peer offers "
            "cm too, else store",
     .field = config_field<&VerbsConfig::ib_connect>()},
    // Like NCCL_IB_TIMEOUT / _RETRY_CNT / _SL / _TC; the same on the cm and store paths.
    {.name = "EAGERCOMM_IB_TIMEOUT",
     .kind = ConfigKind::kInt,
     .default_text = "18",
     .min = 1,
     .max = 31,
     .doc = "verbs ACK timeout per try, IB-encoded: 4.096 us x 2^value (18: 1.07 s); a dead peer "
            "is found after (EAGERCOMM_IB_RETRY_CNT + 1) tries. Lower finds it sooner; too low "
            "fails healthy peers on a congested fabric",
     .field = config_field<&VerbsConfig::ib_timeout>()},
    {.name = "EAGERCOMM_IB_RETRY_CNT",
     .kind = ConfigKind::kInt,
     .default_text = "7",
     .max = 7,
     .doc = "verbs transport retries after an ACK timeout before a write fails and its peer is "
            "reported lost",
     .field = config_field<&VerbsConfig::ib_retry_cnt>()},
    {.name = "EAGERCOMM_IB_SL",
     .kind = ConfigKind::kInt,
     .default_text = "auto",
     .max = 15,
     .doc = "InfiniBand service level of the verbs queue pairs (with RoCE: the priority the "
            "NIC maps it to); auto: the path record's on the cm path, 0 on the store path",
     .field = config_field<&VerbsConfig::ib_sl>(),
     .allows_auto = true},
    {.name = "EAGERCOMM_IB_TC",
     .kind = ConfigKind::kInt,
     .default_text = "auto",
     .max = 255,
     .doc = "traffic class of the verbs queue pairs' GRH (RoCE: DSCP << 2 | ECN; set it to the "
            "lossless class on a PFC fabric); auto: rdma_cm's on the cm path, 0 on the store "
            "path",
     .field = config_field<&VerbsConfig::ib_tc>(),
     .allows_auto = true},
    {.name = "EAGERCOMM_IB_MTU",
     .kind = ConfigKind::kEnum,
     .default_text = "auto",
     .choices = kIbMtuNames,
     .doc = "largest path MTU of the verbs queue pairs, in bytes; auto: the smaller of the two "
            "ports' active MTUs on the store path, the path record's on the cm path. Set it when "
            "a link between the ports has a smaller MTU than they do (the store path cannot ask "
            "the subnet manager for the path)",
     .field = config_field<&VerbsConfig::ib_mtu>()},
    {.name = "EAGERCOMM_VERBS_EMULATE",
     .kind = ConfigKind::kBool,
     .default_text = "0",
     .doc = "run the verbs transport on eagercomm's emulated RDMA device (ranks as threads or "
            "as processes of one host, shared memory as the wire) instead of the host's "
            "rdma-core: a test and development aid with a NIC's semantics, not a fast path",
     .field = config_field<&VerbsConfig::verbs_emulate>()},
};

}  // namespace

std::span<const ConfigRow> verbs_config_rows() { return kVerbsRows; }

Result<VerbsConfig> VerbsConfig::from_environ() {
  VerbsConfig config;
  const ConfigGroup group = config_group<VerbsConfig, VerbsConfig>(verbs_config_rows());
  EC_RETURN_IF_ERROR(config_load({&group, 1}, config_environ(), &config, nullptr));
  return config;
}

}  // namespace eagercomm
