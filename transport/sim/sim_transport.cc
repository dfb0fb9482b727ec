// One rank's endpoint of a SimNetwork (sim_network.h).
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "transport/peer_contacts.h"
#include "transport/sim/sim_network.h"
#include "transport/write_bounds.h"

namespace eagercomm::sim {
namespace {

struct Key {
  int32_t rank;
  uint32_t id;
};

class SimRegion final : public MemoryRegion {
 public:
  SimRegion(SimNetwork& net, int rank, void* data, size_t size, bool owned)
      : MemoryRegion(data, size, MemoryKind::kHost), net_(net), rank_(rank), owned_(owned) {
    id_ = net.add_region(rank, static_cast<uint8_t*>(data), size);
    const Key key{rank, id_};
    remote_key_.resize(sizeof(key));
    std::memcpy(remote_key_.data(), &key, sizeof(key));
  }
  ~SimRegion() override {
    net_.drop_region(rank_, id_);
    if (owned_) munmap(data_, size_);
  }

 private:
  SimNetwork& net_;
  int rank_;
  uint32_t id_ = 0;
  bool owned_;
};

class SimRemote final : public RemoteRegion {
 public:
  SimRemote(int peer, size_t size, uint8_t* data) : RemoteRegion(peer, size), data_(data) {}
  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_;
};

class SimTransport final : public Transport {
 public:
  SimTransport(SimNetwork& net, int rank, int size)
      : Transport(rank, size), net_(net), contacts_(size) {}
  ~SimTransport() override { close(); }

  std::string_view name() const override { return "sim"; }

  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) override {
    if (kind != MemoryKind::kHost) {
      return Status(StatusCode::kNotSupported, "sim: host memory only");
    }
    // Anonymous mappings are zero-filled and committed page by page as they are touched: a
    // mailbox of P ranks costs what its slots in use cost.
    void* p = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return make_status(StatusCode::kNoMemory, "sim: cannot map %zu bytes: %s", bytes,
                         std::strerror(errno));
    }
    return std::unique_ptr<MemoryRegion>(new SimRegion(net_, rank(), p, bytes, true));
  }

  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind kind) override {
    if (kind != MemoryKind::kHost) {
      return Status(StatusCode::kNotSupported, "sim: host memory only");
    }
    return std::unique_ptr<MemoryRegion>(new SimRegion(net_, rank(), data, bytes, false));
  }

  Result<std::unique_ptr<RemoteRegion>> import_region(int peer,
                                                      std::span<const uint8_t> key) override {
    Key k{};
    if (key.size() != sizeof(k)) {
      return make_status(StatusCode::kInvalidArgument, "sim: a remote key of %zu bytes",
                         key.size());
    }
    std::memcpy(&k, key.data(), sizeof(k));
    if (k.rank != peer) {
      return make_status(StatusCode::kInvalidArgument, "sim: rank %d's key names rank %d", peer,
                         k.rank);
    }
    EC_ASSIGN_OR_RETURN(SimNetwork::Region r, net_.region(peer, k.id));
    return std::unique_ptr<RemoteRegion>(new SimRemote(peer, r.size, r.data));
  }

  std::vector<uint8_t> local_address() const override { return {}; }
  Status connect(int peer, std::span<const uint8_t>) override {
    if (peer < 0 || peer >= size()) {
      return make_status(StatusCode::kInvalidArgument, "sim: peer %d out of range", peer);
    }
    return Status::Ok();
  }

  Status write(const MemoryRegion& local, size_t local_offset, const RemoteRegion& remote,
               size_t remote_offset, size_t bytes, uint32_t tag, uint64_t cookie) override {
    const SimRegion* l = exactly<SimRegion>(local);
    const SimRemote* r = exactly<SimRemote>(remote);
    if (!l || !r) return Status(StatusCode::kInvalidArgument, "sim: a region of another backend");
    EC_RETURN_IF_ERROR(
        check_write_bounds("sim", local, local_offset, remote, remote_offset, bytes));
    contacts_.mark(r->peer());
    return net_.write(rank(), r->peer(), static_cast<const uint8_t*>(l->data()) + local_offset,
                      r->data() + remote_offset, bytes, tag, cookie, true);
  }

  Status notify(int peer, uint32_t tag) override {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return make_status(StatusCode::kInvalidArgument, "sim: notify to rank %d", peer);
    }
    contacts_.mark(peer);
    return net_.write(rank(), peer, nullptr, nullptr, 0, tag, 0, false);
  }

  TransportCaps capabilities() const override {
    TransportCaps caps;
    caps.ranks_in_one_process = true;  // no rank stops alone: no heartbeats
    caps.payloads_elided_above = net_.elide_bytes();
    caps.connects_on_demand = true;
    return caps;
  }
  uint32_t connected_peers() const override { return contacts_.count(); }

  void took_in(size_t bytes) override { net_.took_in(rank(), bytes); }

  size_t poll(std::span<TransportCompletion> out) override {
    const size_t n = net_.poll(rank(), out);
    for (size_t i = 0; i < n; ++i) {
      if (out[i].kind == TransportCompletion::Kind::kNotify) contacts_.mark(out[i].peer);
    }
    return n;
  }

  void wait(std::chrono::nanoseconds timeout) override { net_.wait(rank(), timeout); }
  void wake() override { net_.wake(rank()); }

  Status peer_error(int peer) const override { return net_.peer_error(peer); }
  bool peer_left(int peer) const override { return net_.left(peer); }

  void close() override {
    if (!closed_) net_.close(rank());
    closed_ = true;
  }

 private:
  SimNetwork& net_;
  PeerContacts contacts_;
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> create_sim_transport(const TransportParams& params) {
  SimNetwork* net = installed_network();
  if (net == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "sim: no simulated network in this process (the sim transport runs inside "
                  "eagercomm-sim and the simulation's tests only)");
  }
  if (params.size != net->size() || params.rank < 0 || params.rank >= params.size) {
    return make_status(StatusCode::kInvalidArgument,
                       "sim: rank %d of %d on a simulated network of %d ranks", params.rank,
                       params.size, net->size());
  }
  return std::unique_ptr<Transport>(new SimTransport(*net, params.rank, params.size));
}

}  // namespace eagercomm::sim
