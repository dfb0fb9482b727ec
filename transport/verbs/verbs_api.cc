#include "transport/verbs/verbs_api.h"

#include <dlfcn.h>

#include <cstring>

#include "transport/transport_log.h"

namespace eagercomm::verbs {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown error";
}

// Resolves `name` into `fn`; false (and `missing` set once) when the library lacks it.
template <typename Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string* missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr && missing != nullptr && missing->empty()) *missing = name;
  return fn != nullptr;
}

}  // namespace

int VerbsApi::query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  *attr = ibv_port_attr{};
  return query_port_compat(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

int VerbsApi::query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                           uint32_t flags) const {
  return query_gid_ex_sized(ctx, port, index, entry, flags, sizeof(*entry));
}

ForkProtectionResult enable_fork_protection(const VerbsApi& api) {
  if (api.is_fork_initialized != nullptr) {
    switch (api.is_fork_initialized()) {
      case IBV_FORK_UNNEEDED:
        return {ForkProtection::kUnneeded, {}};
      case IBV_FORK_ENABLED:
        return {ForkProtection::kEnabled, {}};
      case IBV_FORK_DISABLED:
        break;
    }
  }
  if (const int e = api.fork_init(); e != 0) {
    return {ForkProtection::kFailed,
            std::string("ibv_fork_init: ") + std::strerror(e) +
                " (memory was registered before eagercomm opened its device: a process forked "
                "after that, e.g. a DataLoader worker, can corrupt registered memory on kernels "
                "before 5.13; set RDMAV_FORK_SAFE=1 before starting the job)"};
  }
  return {ForkProtection::kEnabled, {}};
}

Result<VerbsApi> load_verbs_api(const char* ibverbs_library, const char* rdmacm_library) {
  VerbsApi api;
  void* ib = dlopen(ibverbs_library, RTLD_NOW | RTLD_LOCAL);
  if (ib == nullptr) {
    return make_status(StatusCode::kUnavailable,
                       "verbs: cannot load %s (%s); install rdma-core "
                       "(libibverbs1) for the verbs transport",
                       ibverbs_library, dl_error().c_str());
  }
  api.source = ibverbs_library;
  std::string missing;
  resolve(ib, "ibv_get_device_list", api.get_device_list, &missing);
  resolve(ib, "ibv_free_device_list", api.free_device_list, &missing);
  resolve(ib, "ibv_get_device_name", api.get_device_name, &missing);
  resolve(ib, "ibv_open_device", api.open_device, &missing);
  resolve(ib, "ibv_close_device", api.close_device, &missing);
  resolve(ib, "ibv_query_device", api.query_device, &missing);
  resolve(ib, "ibv_query_port", api.query_port_compat, &missing);
  resolve(ib, "_ibv_query_gid_ex", api.query_gid_ex_sized, &missing);
  resolve(ib, "ibv_alloc_pd", api.alloc_pd, &missing);
  resolve(ib, "ibv_dealloc_pd", api.dealloc_pd, &missing);
  resolve(ib, "ibv_reg_mr", api.reg_mr, &missing);
  resolve(ib, "ibv_dereg_mr", api.dereg_mr, &missing);
  resolve(ib, "ibv_create_comp_channel", api.create_comp_channel, &missing);
  resolve(ib, "ibv_destroy_comp_channel", api.destroy_comp_channel, &missing);
  resolve(ib, "ibv_create_cq", api.create_cq, &missing);
  resolve(ib, "ibv_destroy_cq", api.destroy_cq, &missing);
  resolve(ib, "ibv_get_cq_event", api.get_cq_event, &missing);
  resolve(ib, "ibv_ack_cq_events", api.ack_cq_events, &missing);
  resolve(ib, "ibv_create_qp", api.create_qp, &missing);
  resolve(ib, "ibv_modify_qp", api.modify_qp, &missing);
  resolve(ib, "ibv_destroy_qp", api.destroy_qp, &missing);
  resolve(ib, "ibv_get_async_event", api.get_async_event, &missing);
  resolve(ib, "ibv_ack_async_event", api.ack_async_event, &missing);
  resolve(ib, "ibv_wc_status_str", api.wc_status_str, &missing);
  resolve(ib, "ibv_event_type_str", api.event_type_str, &missing);
  resolve(ib, "ibv_fork_init", api.fork_init, &missing);
  if (!missing.empty()) {
    dlclose(ib);
    return make_status(StatusCode::kUnavailable,
                       "verbs: %s has no %s (rdma-core too old or not libibverbs)", ibverbs_library,
                       missing.c_str());
  }
  resolve(ib, "ibv_reg_dmabuf_mr", api.reg_dmabuf_mr, nullptr);
  resolve(ib, "ibv_is_fork_initialized", api.is_fork_initialized, nullptr);

  void* cm = rdmacm_library != nullptr ? dlopen(rdmacm_library, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (cm == nullptr) {
    api.cm_missing = rdmacm_library == nullptr
                         ? std::string("no librdmacm given")
                         : std::string("cannot load ") + rdmacm_library + " (" + dl_error() + ")";
    return api;
  }
  missing.clear();
  resolve(cm, "rdma_create_event_channel", api.create_event_channel, &missing);
  resolve(cm, "rdma_destroy_event_channel", api.destroy_event_channel, &missing);
  resolve(cm, "rdma_create_id", api.create_id, &missing);
  resolve(cm, "rdma_destroy_id", api.destroy_id, &missing);
  resolve(cm, "rdma_bind_addr", api.bind_addr, &missing);
  resolve(cm, "rdma_resolve_addr", api.resolve_addr, &missing);
  resolve(cm, "rdma_resolve_route", api.resolve_route, &missing);
  resolve(cm, "rdma_listen", api.listen, &missing);
  resolve(cm, "rdma_connect", api.connect, &missing);
  resolve(cm, "rdma_accept", api.accept, &missing);
  resolve(cm, "rdma_reject", api.reject, &missing);
  resolve(cm, "rdma_establish", api.establish, &missing);
  resolve(cm, "rdma_disconnect", api.disconnect, &missing);
  resolve(cm, "rdma_get_cm_event", api.get_cm_event, &missing);
  resolve(cm, "rdma_ack_cm_event", api.ack_cm_event, &missing);
  resolve(cm, "rdma_event_str", api.event_str, &missing);
  resolve(cm, "rdma_init_qp_attr", api.init_qp_attr, &missing);
  resolve(cm, "rdma_get_src_port", api.get_src_port, &missing);
  if (!missing.empty()) {
    dlclose(cm);
    api.cm_missing = std::string(rdmacm_library) + " has no " + missing;
    return api;
  }
  api.has_cm = true;
  return api;
}

Result<const VerbsApi*> system_verbs_api() {
  // Initialised once, thread-safely; logged once.
  static const Result<VerbsApi> loaded = [] {
    Result<VerbsApi> api = load_verbs_api("libibverbs.so.1", "librdmacm.so.1");
    if (!api.ok()) {
      EC_INFO(kNet, "%s", api.status().message().c_str());
    } else if (!api.value().has_cm) {
      EC_INFO(kNet, "verbs: rdma_cm unavailable (%s): queue pairs connect through the store",
              api.value().cm_missing.c_str());
    }
    return api;
  }();
  if (!loaded.ok()) return loaded.status();
  return &loaded.value();
}

}  // namespace eagercomm::verbs
