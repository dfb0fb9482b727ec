#include "sim/collective_sim.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace eagercomm::sim {
namespace {

class CollectiveDriver final : public RankDriver {
 public:
  CollectiveDriver(SimWorld& world, const CollectiveRun& run)
      : world_(world),
        run_(run),
        count_(run.bytes / sizeof(float)),
        ranks_(world.size()),
        start_ns_(world.network().now_ns()),
        call_end_us_(run.iters, 0.0) {
    const bool copied = run.bytes <= world.network().elide_bytes();
    // Buffers per rank where the payloads are copied; one shared pair otherwise (their values
    // are not looked at, and P copies of a large vector would not fit).
    const int buffers = copied ? world.size() : 1;
    in_.assign(buffers, std::vector<float>(count_));
    out_.assign(buffers, std::vector<float>(count_));
    for (int r = 0; r < buffers; ++r) {
      for (size_t i = 0; i < count_; ++i) in_[r][i] = static_cast<float>((r + 1) * (i % 7 + 1));
    }
  }

  void run(int rank) override {
    Rank& me = ranks_[rank];
    world_.progress(rank);
    if (me.in_op) {
      const Status st = me.request.test();
      if (st.code() == StatusCode::kInProgress) return;
      me.in_op = false;
      if (!st.ok() && error_.ok()) error_ = st;
      const double at = static_cast<double>(world_.network().reduced_by(rank) - start_ns_) / 1e3;
      call_end_us_[me.done] = std::max(call_end_us_[me.done], at);
      if (++me.done == run_.iters) ++finished_;
    }
    if (me.done < run_.iters && error_.ok()) {
      Result<Request> started = start(rank);
      if (!started.ok()) {
        error_ = started.status();
        return;
      }
      me.request = std::move(started).value();
      me.in_op = true;
      world_.progress(rank);
    }
  }

  bool over() const { return finished_ == world_.size() || !error_.ok(); }
  const std::vector<double>& call_end_us() const { return call_end_us_; }
  const Status& error() const { return error_; }

  uint64_t check() const {
    if (in_.size() != static_cast<size_t>(world_.size())) return 0;
    const int P = world_.size();
    uint64_t wrong = 0;
    for (int r = 0; r < P; ++r) {
      for (size_t i = 0; i < count_; ++i) {
        float want = 0;
        if (run_.collective == "allreduce") {
          want = static_cast<float>(P * (P + 1) / 2 * (i % 7 + 1));
        } else {
          want = static_cast<float>(i % 7 + 1);  // broadcast from rank 0, in place
        }
        const float got = run_.collective == "allreduce" ? out_[r][i] : in_[r][i];
        wrong += got != want;
      }
    }
    return wrong;
  }

 private:
  struct Rank {
    Request request;
    bool in_op = false;
    int done = 0;
  };

  Result<Request> start(int rank) {
    const int b = in_.size() == 1 ? 0 : rank;
    Communicator& c = world_.comm(rank);
    if (run_.collective == "allreduce") {
      return c.allreduce_async(in_[b].data(), out_[b].data(), count_, DataType::kFloat32,
                               ReduceOp::kSum);
    }
    if (run_.collective == "broadcast") {
      return c.broadcast_async(in_[b].data(), count_, DataType::kFloat32, 0);
    }
    return c.barrier_async();
  }

  SimWorld& world_;
  const CollectiveRun run_;
  const size_t count_;
  std::vector<Rank> ranks_;
  std::vector<std::vector<float>> in_, out_;
  const int64_t start_ns_;
  std::vector<double> call_end_us_;
  int finished_ = 0;
  Status error_;
};

}  // namespace

Result<CollectiveResult> run_collective(SimWorld& world, const CollectiveRun& run) {
  if (run.collective != "allreduce" && run.collective != "broadcast" &&
      run.collective != "barrier") {
    return make_status(StatusCode::kInvalidArgument,
                       "sim: unknown collective '%s' (allreduce, broadcast, barrier)",
                       run.collective.c_str());
  }
  if (run.bytes % sizeof(float) != 0 || run.iters < 1) {
    return make_status(StatusCode::kInvalidArgument,
                       "sim: %zu bytes (whole f32 elements) and %d iterations (at least 1)",
                       run.bytes, run.iters);
  }
  SimNetwork& net = world.network();
  CollectiveDriver driver(world, run);
  const NetworkStats before = net.stats();
  const int64_t start = net.now_ns();
  for (int r = 0; r < world.size(); ++r) net.schedule_run(r, start);
  const auto wall = std::chrono::steady_clock::now();
  const bool over = net.run(driver, [&] { return driver.over(); });
  CollectiveResult out;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  if (!driver.error().ok()) return driver.error();
  if (!over) {
    return Status(StatusCode::kInternal,
                  "sim: the event queue ran dry before every rank finished (a lost wake-up)");
  }
  out.call_end_us = driver.call_end_us();
  // Until the last rank's CPU was done with the last call (its reductions may end after the
  // last event).
  out.time_us = std::max(static_cast<double>(net.now_ns() - start) / 1e3,
                         out.call_end_us.empty() ? 0.0 : out.call_end_us.back()) /
                run.iters;
  out.first_us = out.call_end_us.front();
  out.checked = run.bytes <= net.elide_bytes() && run.collective != "barrier";
  if (out.checked) out.wrong = driver.check();
  out.network.messages = net.stats().messages - before.messages;
  out.network.bytes = net.stats().bytes - before.bytes;
  out.network.events = net.stats().events - before.events;
  out.connections = world.most_connections();
  return out;
}

}  // namespace eagercomm::sim
