// Gloo's allreduce as a baseline of eagercomm-bench --compare: TCP transport, rendezvous through
// eagercomm's bootstrap store (an adapter below), the default (ring) algorithm.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdlib>
#include <exception>

#include "bench/baselines.h"
#include "collectives/config.h"

namespace eagercomm::bench {
namespace {

// Gloo's Store interface over eagercomm's: Gloo throws on failure, so errors become exceptions
// here and a Status again in make_gloo_baseline().
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(eagercomm::Store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(store_.set(prefix_ + key, Bytes(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    Result<Bytes> v = store_.get(prefix_ + key, timeout_);
    check(v.status());
    return std::vector<char>(v.value().begin(), v.value().end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    check(store_.wait(full, timeout));
  }

 private:
  static void check(const Status& s) {
    if (!s.ok()) throw std::runtime_error("eagercomm store: " + s.to_string());
  }
  eagercomm::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return &gloo::sum<T>;
    case ReduceOp::kMin:
      return &gloo::min<T>;
    case ReduceOp::kMax:
      return &gloo::max<T>;
  }
  return nullptr;
}

struct GlooState {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::chrono::milliseconds timeout;
};

template <class T>
Status run_allreduce(GlooState& g, const void* send, void* recv, size_t count, ReduceOp op) {
  gloo::AllreduceOptions opts(g.context);
  opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
  opts.setOutput(static_cast<T*>(recv), count);
  opts.setReduceFunction(reduce_fn<T>(op));
  opts.setTimeout(g.timeout);
  gloo::allreduce(opts);
  return Status::Ok();
}

}  // namespace

Result<Baseline> make_gloo_baseline(Communicator& comm) {
  Store* store = comm.bootstrap_store();
  if (store == nullptr) {
    return Status(StatusCode::kNotSupported,
                  "gloo baseline: the communicator has no bootstrap store to rendezvous through");
  }
  const Result<Config>& config = Config::process();
  if (!config.ok()) return config.status();
  auto g = std::make_shared<GlooState>();
  const auto timeout =
      config.value().timeout.count() > 0
          ? std::chrono::duration_cast<std::chrono::milliseconds>(config.value().timeout)
          : std::chrono::milliseconds(gloo::rendezvous::Store::kDefaultTimeout);
  g->timeout = timeout;
  try {
    gloo::transport::tcp::attr attr;
    // Gloo binds to the address its host name resolves to unless told an interface, as in
    // PyTorch (GLOO_SOCKET_IFNAME).
    if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME")) attr.iface = iface;
    g->device = gloo::transport::tcp::CreateDevice(attr);
    g->context = std::make_shared<gloo::rendezvous::Context>(comm.rank(), comm.size());
    g->context->setTimeout(timeout);
    GlooStoreAdapter adapter(*store, "gloo-baseline/", timeout);
    g->context->connectFullMesh(adapter, g->device);
  } catch (const std::exception& e) {
    return make_status(StatusCode::kUnavailable, "gloo baseline: rendezvous failed: %s", e.what());
  }
  Baseline b;
  b.name = "gloo";
  b.description = "Gloo 0.5 tcp (" + g->device->str() + ")";
  b.state = g;
  GlooState* raw = g.get();
  b.allreduce = [raw](const void* send, void* recv, size_t count, DataType type,
                      ReduceOp op) -> Status {
    try {
      switch (type) {
        case DataType::kFloat32:
          return run_allreduce<float>(*raw, send, recv, count, op);
        case DataType::kFloat64:
          return run_allreduce<double>(*raw, send, recv, count, op);
        case DataType::kInt32:
          return run_allreduce<int32_t>(*raw, send, recv, count, op);
        case DataType::kInt64:
          return run_allreduce<int64_t>(*raw, send, recv, count, op);
        default:
          return make_status(StatusCode::kNotSupported, "gloo baseline: type %s not wired",
                             std::string(dtype_name(type)).c_str());
      }
    } catch (const std::exception& e) {
      return make_status(StatusCode::kIoError, "gloo allreduce failed: %s", e.what());
    }
  };
  return b;
}

}  // namespace eagercomm::bench
