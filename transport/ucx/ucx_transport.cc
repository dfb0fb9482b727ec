#include "transport/ucx/ucx_transport.h"

#include <errno.h>
#include <sys/eventfd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "runtime/host_identity.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport_log.h"
#include "transport/ucx/ucx_transport_impl.h"
#include "transport/ucx/ucx_wire.h"

namespace eagercomm {
namespace ucx {

std::string beacon_name(const std::string& job, uint64_t instance) {
  char hex[20];
  snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(instance));
  const std::string j = shm_sanitize_job_id(job);
  return "/eagercomm-" + (j.empty() ? std::string("nojob") : j) + "-ucx-" + hex + "-live";
}

Status UcxTransport::init() {
  std::random_device rd;
  instance_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
              static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  ucs_status_t s = ucp_worker_query(core_->worker, &attr);
  if (s != UCS_OK) return ucx_failure(s, "querying the worker");
  can_arm_ = attr.thread_mode == UCS_THREAD_MODE_MULTI;
  if (!can_arm_) {
    EC_WARN(kNet,
            "ucx: the worker is not thread-safe (UCX built without multi-thread "
            "support?): wait() naps %lld ms at a time instead of sleeping on the event fd",
            static_cast<long long>(kUnarmedNap.count()));
  }

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                  UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kNotifyAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &UcxTransport::on_note;
  hp.arg = this;
  s = ucp_worker_set_am_recv_handler(core_->worker, &hp);
  if (s != UCS_OK) return ucx_failure(s, "setting the notification handler");
  hp.id = kControlAmId;
  hp.cb = &UcxTransport::on_control;
  s = ucp_worker_set_am_recv_handler(core_->worker, &hp);
  if (s != UCS_OK) return ucx_failure(s, "setting the control handler");
  host_ = host_identity_hash();
  shared_memory_ = context_has_shared_memory(core_->context);
  // Without a beacon peers on this host cannot tell our death from slowness: worth a warning,
  // not a failure.
  Result<LivenessBeacon> beacon = LivenessBeacon::create(beacon_name(job_, instance_));
  if (beacon.ok()) {
    beacon_ = std::move(beacon.value());
  } else {
    EC_WARN(kNet, "ucx: %s; peers on this host will not detect this rank's death",
            beacon.status().message().c_str());
  }

  s = ucp_worker_get_efd(core_->worker, &worker_efd_);
  if (s != UCS_OK) return ucx_failure(s, "getting the worker's event fd");

  ucp_address_t* worker_address = nullptr;
  size_t worker_bytes = 0;
  s = ucp_worker_get_address(core_->worker, &worker_address, &worker_bytes);
  if (s != UCS_OK) return ucx_failure(s, "getting the worker address");
  const auto* wa = reinterpret_cast<const uint8_t*>(worker_address);
  std::vector<uint8_t> body(wa, wa + worker_bytes);
  ucp_worker_release_address(core_->worker, worker_address);

  // The notification region: its key travels in the address, so peers map it at connect().
  Result<std::unique_ptr<MemoryRegion>> region = allocate(
      notify_ring::block_bytes(kNotifyBlockBytes, size(), ring_capacity_), MemoryKind::kHost);
  if (!region.ok()) return region.status();
  notify_region_ = std::move(region.value());
  auto* base = static_cast<uint8_t*>(notify_region_->data());
  notify_block_ = std::construct_at(reinterpret_cast<NotifyBlock*>(base));
  notify_ring::init_rings(base, kNotifyBlockBytes, size(), ring_capacity_);
  for (int sender = 0; sender < size(); ++sender) {
    consumers_[sender] = notify_ring::consumer_at(base, kNotifyBlockBytes, sender, ring_capacity_);
  }
  for (int sender = 0; sender < size(); ++sender) {
    if (sender != rank()) ring_senders_.push_back(sender);
  }
  UcxAddressHeader h{};
  h.rank = rank();
  h.instance = instance_;
  h.host = host_;
  h.ring_capacity = ring_capacity_;
  address_ = ucx_encode_address(h, body, notify_region_->remote_key());

  for (WaitSlot& slot : slots_) {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      EC_ERROR(kNet, "ucx: eventfd for wake-ups failed: %m");
      return make_status(StatusCode::kIoError, "ucx: eventfd for wake-ups failed: %s",
                         strerror(errno));
    }
    slot.fd = UniqueFd(fd);
  }
  EC_INFO(kNet, "ucx: worker ready for %d ranks (address %zu bytes, %s, %zu requests max)", size(),
          worker_bytes, tls_hint().c_str(), op_count_);
  return Status::Ok();
}

}  // namespace ucx

Status ucx_memory_kind_supported(MemoryKind kind, bool ucx_has_cuda) {
  if (kind == MemoryKind::kHost) return Status::Ok();
  if (kind == MemoryKind::kCuda && ucx_has_cuda) return Status::Ok();
  if (kind == MemoryKind::kCuda) {
    return Status(StatusCode::kNotSupported,
                  "ucx: CUDA memory needs a UCX built with CUDA support (its cuda_copy / cuda_ipc "
                  "transports); this UCX reports no UCS_MEMORY_TYPE_CUDA (ucx_info -d lists its "
                  "transports; distribution packages such as Debian's UCX 1.13 have none)");
  }
  return make_status(StatusCode::kNotSupported, "ucx: memory kind %s is not supported",
                     std::string(memory_kind_name(kind)).c_str());
}

Result<std::unique_ptr<Transport>> create_ucx_transport(const TransportParams& params) {
  return create_ucx_transport(params, UcxTransportOptions{});
}

Result<std::unique_ptr<Transport>> create_ucx_transport(const TransportParams& params,
                                                        const UcxTransportOptions& options) {
  if (params.size < 1 || params.rank < 0 || params.rank >= params.size) {
    return make_status(StatusCode::kInvalidArgument, "ucx: rank %d is not in a world of size %d",
                       params.rank, params.size);
  }
  UcxTransportOptions opts = options;
  if (opts.max_outstanding == 0) {
    const size_t slots = params.config ? params.config->slots : TransportConfig{}.slots;
    opts.max_outstanding =
        std::max<size_t>(1024, 4 * static_cast<size_t>(params.size) * slots + 256);
  }

  auto core = std::make_shared<ucx::UcxCore>();
  ucp_config_t* ucx_config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &ucx_config);
  if (s != UCS_OK) {
    EC_ERROR(kNet, "ucx: reading the UCX_* configuration failed: %s", ucs_status_string(s));
    return make_status(StatusCode::kUnavailable, "ucx: reading the UCX_* configuration failed: %s",
                       ucs_status_string(s));
  }
  ucp_params_t up{};
  up.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                  UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
  up.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  // Regions may be mapped and unmapped from other threads than the driver.
  up.mt_workers_shared = 1;
  up.estimated_num_eps = static_cast<size_t>(params.size);
  up.name = "eagercomm";
  s = ucp_init(&up, ucx_config, &core->context);
  ucp_config_release(ucx_config);
  if (s != UCS_OK) {
    core->context = nullptr;
    EC_ERROR(kNet, "ucx: ucp_init failed: %s (%s)", ucs_status_string(s), ucx::tls_hint().c_str());
    return make_status(StatusCode::kUnavailable, "ucx: ucp_init failed: %s (%s)",
                       ucs_status_string(s), ucx::tls_hint().c_str());
  }
  // Whether UCX can take CUDA memory: only builds with its cuda transports loaded say so.
  ucp_context_attr_t ca{};
  ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  core->cuda_memory = ucp_context_query(core->context, &ca) == UCS_OK &&
                      (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // MULTI: wait() arms the worker from threads that are not driving (see wait()).
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  s = ucp_worker_create(core->context, &wp, &core->worker);
  if (s != UCS_OK) {
    core->worker = nullptr;
    return ucx::ucx_failure(s, "creating the worker");
  }
  const uint32_t ring_capacity =
      notify_ring::capacity_for(params.config ? params.config->slots : TransportConfig{}.slots);
  auto transport = std::make_unique<ucx::UcxTransport>(
      params.rank, params.size, opts, std::move(core), params.config ? params.config->job_id : "",
      ring_capacity);
  EC_RETURN_IF_ERROR(transport->init());
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace eagercomm
