#include "bench/bench_p2p.h"

#include "collectives/config.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "runtime/job_bootstrap.h"
#include "transport/registry.h"

namespace eagercomm::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kAckTag = 0xffffffffu;

// One side of the pair: the transport, this rank's region and the peer's.
class Endpoint {
 public:
  // Writes go from the send area of `local` (at send_offset) to the receive area of `remote`
  // (at 0): separate buffers, as in ucx_perftest and ib_write_lat, so that answering does not
  // read what the peer just wrote (see --consume for that).
  Endpoint(Transport& t, int peer, const MemoryRegion& local, size_t send_offset,
           const RemoteRegion& remote, std::chrono::nanoseconds timeout)
      : t_(t),
        peer_(peer),
        local_(local),
        send_offset_(send_offset),
        remote_(remote),
        timeout_(timeout) {}

  // Issues a write of `bytes` with `tag`, polling while the transport pushes back. The clock is
  // read only once the transport has pushed back: a clock read (~25 ns here) before every write
  // would sit between seeing the peer's notification and answering it.
  Status write(size_t bytes, uint32_t tag) {
    Status s = t_.write(local_, send_offset_, remote_, 0, bytes, tag, 0);
    if (s.code() != StatusCode::kBusy) return s;
    return retry([&] { return t_.write(local_, send_offset_, remote_, 0, bytes, tag, 0); });
  }

  Status notify(uint32_t tag) {
    Status s = t_.notify(peer_, tag);
    if (s.code() != StatusCode::kBusy) return s;
    return retry([&] { return t_.notify(peer_, tag); });
  }

  // Busy-polls (as ucx_perftest does) until `n` notifications from the peer arrived.
  Status await_notifications(uint64_t n) {
    const auto deadline = Clock::now() + timeout_;
    for (uint32_t spins = 0; notified_ < n; ++spins) {
      EC_RETURN_IF_ERROR(drain());
      if ((spins & 1023) == 1023 && notified_ < n && Clock::now() > deadline) {
        return make_status(StatusCode::kTimeout,
                           "p2p: rank %d saw %llu of %llu notifications from rank %d within "
                           "EAGERCOMM_TIMEOUT",
                           t_.rank(), static_cast<unsigned long long>(notified_),
                           static_cast<unsigned long long>(n), peer_);
      }
    }
    notified_ -= n;
    return Status::Ok();
  }

  // Reads the `bytes` the peer wrote into this rank's receive area (--consume): one byte in
  // every 8, enough to bring each cache line over; volatile, so the reads stay.
  void consume(size_t bytes) const {
    const auto* p = static_cast<const volatile uint8_t*>(local_.data());
    for (size_t i = 0; i < bytes; i += 8) (void)p[i];
  }

 private:
  Status drain() {
    std::array<TransportCompletion, 64> c;
    const size_t n = t_.poll(c);
    for (size_t i = 0; i < n; ++i) {
      if (c[i].kind == TransportCompletion::Kind::kPeerError) {
        return make_status(StatusCode::kPeerFailed, "p2p: transport %s lost rank %d",
                           std::string(t_.name()).c_str(), c[i].peer);
      }
      if (c[i].kind == TransportCompletion::Kind::kNotify && c[i].peer == peer_) ++notified_;
    }
    return Status::Ok();
  }
  // Repeats `issue` while it says kBusy, draining completions, until EAGERCOMM_TIMEOUT.
  template <class Issue>
  Status retry(Issue issue) {
    const auto deadline = Clock::now() + timeout_;
    for (uint32_t spins = 0;; ++spins) {
      EC_RETURN_IF_ERROR(drain());
      Status s = issue();
      if (s.code() != StatusCode::kBusy) return s;
      if ((spins & 1023) == 1023 && Clock::now() > deadline) return busy_timeout();
    }
  }
  Status busy_timeout() const {
    return make_status(StatusCode::kTimeout, "p2p: transport stayed busy for EAGERCOMM_TIMEOUT");
  }

  Transport& t_;
  int peer_;
  const MemoryRegion& local_;
  size_t send_offset_;
  const RemoteRegion& remote_;
  std::chrono::nanoseconds timeout_;
  uint64_t notified_ = 0;
};

std::vector<size_t> sizes_of(const Options& o) {
  std::vector<size_t> out;
  for (double b = static_cast<double>(std::max<size_t>(o.min_bytes, 1));
       b <= static_cast<double>(o.max_bytes); b *= o.factor) {
    if (out.empty() || out.back() != static_cast<size_t>(b)) out.push_back(static_cast<size_t>(b));
  }
  return out;
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Bandwidth rounds per size: enough windows for a stable figure, bounded for large messages.
int bw_rounds(const Options& o, size_t bytes) {
  const double per_round = static_cast<double>(bytes) * o.window;
  return std::clamp(static_cast<int>(256.0 * 1024 * 1024 / per_round), 3,
                    std::max(3, o.iters / 10));
}

Result<std::vector<P2pRow>> measure(Endpoint& ep, int rank, const Options& o) {
  std::vector<P2pRow> rows;
  for (size_t bytes : sizes_of(o)) {
    P2pRow row;
    row.bytes = bytes;
    std::vector<double> rtt;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      if (rank == 0) {
        const auto t0 = Clock::now();
        EC_RETURN_IF_ERROR(ep.write(bytes, static_cast<uint32_t>(it)));
        EC_RETURN_IF_ERROR(ep.await_notifications(1));
        if (o.consume) ep.consume(bytes);
        if (it >= o.warmup) rtt.push_back(us_since(t0));
      } else {
        EC_RETURN_IF_ERROR(ep.await_notifications(1));
        if (o.consume) ep.consume(bytes);
        EC_RETURN_IF_ERROR(ep.write(bytes, static_cast<uint32_t>(it)));
      }
    }
    // The mean, as ucx_perftest takes it: the whole ping-pong loop timed once, so that the
    // clock reads of the per-iteration pass above (two per round trip, ~25 ns each here) are
    // not counted as latency.
    const auto loop0 = Clock::now();
    for (int it = 0; it < o.iters; ++it) {
      if (rank == 0) {
        EC_RETURN_IF_ERROR(ep.write(bytes, static_cast<uint32_t>(it)));
        EC_RETURN_IF_ERROR(ep.await_notifications(1));
        if (o.consume) ep.consume(bytes);
      } else {
        EC_RETURN_IF_ERROR(ep.await_notifications(1));
        if (o.consume) ep.consume(bytes);
        EC_RETURN_IF_ERROR(ep.write(bytes, static_cast<uint32_t>(it)));
      }
    }
    const double loop_us = us_since(loop0);
    const int rounds = bw_rounds(o, bytes);
    Clock::time_point t0;
    for (int r = -1; r < rounds; ++r) {  // round -1 warms up
      if (r == 0) t0 = Clock::now();
      if (rank == 0) {
        for (int w = 0; w < o.window; ++w)
          EC_RETURN_IF_ERROR(ep.write(bytes, static_cast<uint32_t>(w)));
        EC_RETURN_IF_ERROR(ep.await_notifications(1));
      } else {
        EC_RETURN_IF_ERROR(ep.await_notifications(static_cast<uint64_t>(o.window)));
        EC_RETURN_IF_ERROR(ep.notify(kAckTag));
      }
    }
    if (rank == 0) {
      row.latency_mean_us = loop_us / o.iters / 2;
      std::sort(rtt.begin(), rtt.end());
      row.latency_us = rtt[rtt.size() / 2] / 2;
      row.latency_p99_us = rtt[std::min(rtt.size() - 1, rtt.size() * 99 / 100)] / 2;
      row.bandwidth_gbps = static_cast<double>(bytes) * o.window * rounds / us_since(t0) / 1e3;
    }
    rows.push_back(row);
  }
  return rows;
}

Status wait_key(Store& store, const std::string& key, std::chrono::nanoseconds timeout,
                const char* what, int peer) {
  Status s = store.wait({key}, timeout);
  if (s.code() == StatusCode::kTimeout) {
    return make_status(StatusCode::kTimeout, "p2p: rank %d never published its %s", peer, what);
  }
  return s;
}

}  // namespace

Result<P2pReport> run_p2p(const Options& o) {
  const Result<Config>& process = Config::process();
  if (!process.ok()) return process.status();
  Config config = process.value();
  EC_ASSIGN_OR_RETURN(JobBootstrap job, join_job(config));
  config.job_id = job.info.job_id;
  const int rank = job.info.rank, size = job.info.size;
  EC_RETURN_IF_ERROR(check_for_ranks(o, size));
  Store& store = *job.store;
  const std::string scope = "eagercomm-p2p/" + job.info.job_id;
  const auto timeout = config.timeout.count() > 0 ? config.timeout : std::chrono::hours(24 * 365);
  TransportParams params{rank, size, &config, &store, scope, false};
  P2pReport report;
  report.ranks = size;
  report.reports = rank == 0;
  EC_ASSIGN_OR_RETURN(report.transport, resolve_transport_name(config.transport, params));
  EC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, create_transport(report.transport, params));
  const std::string done_key = scope + "/done";
  if (rank >= 2) {  // not part of the pair: stay until the pair is done
    EC_RETURN_IF_ERROR(wait_key(store, done_key, timeout, "end of the benchmark", 0));
    EC_RETURN_IF_ERROR(store.set(scope + "/" + std::to_string(rank) + "/finished", {1}));
    return report;
  }
  const int peer = 1 - rank;
  // The receive area, then (from a fresh cache line) the send area.
  const size_t send_offset = (std::max<size_t>(o.max_bytes, 8) + 63) / 64 * 64;
  EC_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                      t->allocate(2 * send_offset, MemoryKind::kHost));
  const std::string mine = scope + "/" + std::to_string(rank),
                    theirs = scope + "/" + std::to_string(peer);
  EC_RETURN_IF_ERROR(store.set(mine + "/address", t->local_address()));
  EC_RETURN_IF_ERROR(store.set(mine + "/key", region->remote_key()));
  EC_RETURN_IF_ERROR(wait_key(store, theirs + "/key", timeout, "address", peer));
  EC_ASSIGN_OR_RETURN(Bytes address, store.get(theirs + "/address", timeout));
  EC_RETURN_IF_ERROR(t->connect(peer, address));
  EC_ASSIGN_OR_RETURN(Bytes key, store.get(theirs + "/key", timeout));
  EC_ASSIGN_OR_RETURN(std::unique_ptr<RemoteRegion> remote, t->import_region(peer, key));
  Endpoint ep(*t, peer, *region, send_offset, *remote, timeout);
  // Both connected before the first timed write.
  EC_RETURN_IF_ERROR(store.set(mine + "/ready", {1}));
  EC_RETURN_IF_ERROR(wait_key(store, theirs + "/ready", timeout, "readiness", peer));
  EC_ASSIGN_OR_RETURN(report.rows, measure(ep, rank, o));
  // Rank 1 leaves only after rank 0 has its last acknowledgement (its region must stay mapped).
  EC_RETURN_IF_ERROR(store.set(mine + "/finished", {1}));
  EC_RETURN_IF_ERROR(wait_key(store, theirs + "/finished", timeout, "end of the benchmark", peer));
  if (rank == 0) {
    // Rank 0 may serve the store (torchrun, srun): it leaves after the bystanders read done_key.
    EC_RETURN_IF_ERROR(store.set(done_key, {1}));
    for (int r = 2; r < size; ++r) {
      EC_RETURN_IF_ERROR(wait_key(store, scope + "/" + std::to_string(r) + "/finished", timeout,
                                  "end of the benchmark", r));
    }
  }
  return report;
}

void print_p2p(FILE* out, const Options& o, const P2pReport& r) {
  std::fprintf(out,
               "# eagercomm-bench --p2p: transport %s, rank 0 <-> rank 1 (job of %d), "
               "transport-allocated regions, separate send and receive buffers%s\n",
               r.transport.c_str(), r.ranks,
               o.consume ? ", the receiver reads each payload (--consume)" : "");
  std::fprintf(out,
               "# latency: half the median round trip of write+notify ping-pong over %d "
               "iterations (warm-up %d); mean: a second loop of as many round trips timed as "
               "a whole (as ucx_perftest does), halved\n# bandwidth: %d writes in flight, then "
               "one acknowledgement\n#\n",
               o.iters, o.warmup, o.window);
  std::fprintf(out, "#%11s %12s %12s %12s %12s\n#%11s %12s %12s %12s %12s\n", "size", "latency",
               "lat mean", "lat p99", "bandwidth", "(B)", "(us)", "(us)", "(us)", "(GB/s)");
  for (const P2pRow& row : r.rows) {
    std::fprintf(out, " %11zu %12.3f %12.3f %12.3f %12.3f\n", row.bytes, row.latency_us,
                 row.latency_mean_us, row.latency_p99_us, row.bandwidth_gbps);
  }
}

std::string p2p_json(const Options& o, const P2pReport& r) {
  std::string s = "{\n  \"benchmark\": \"eagercomm-bench --p2p\",\n";
  s += "  \"transport\": \"" + r.transport + "\",\n";
  s += "  \"ranks\": " + std::to_string(r.ranks) + ",\n";
  s += "  \"iters\": " + std::to_string(o.iters) + ",\n";
  s += "  \"window\": " + std::to_string(o.window) + ",\n";
  s += std::string("  \"consume\": ") + (o.consume ? "true" : "false") + ",\n  \"rows\": [";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    char b[256];
    std::snprintf(b, sizeof(b),
                  "{\"bytes\": %zu, \"latency_us\": %.6g, \"latency_mean_us\": %.6g, "
                  "\"latency_p99_us\": %.6g, \"bandwidth_gbps\": %.6g}",
                  r.rows[i].bytes, r.rows[i].latency_us, r.rows[i].latency_mean_us,
                  r.rows[i].latency_p99_us, r.rows[i].bandwidth_gbps);
    s += (i ? ",\n    " : "\n    ") + std::string(b);
  }
  s += "\n  ]\n}\n";
  return s;
}

}  // namespace eagercomm::bench
