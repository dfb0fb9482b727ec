#include "sim/partial_sim.h"

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "collectives/partial_allreduce.h"

namespace eagercomm::sim {
namespace {

// The ranks drawn in step `step`: the same for every rank (a shared PRNG, as the paper's).
std::vector<uint8_t> draw_stragglers(const PartialRun& run, int P, int step) {
  std::mt19937_64 rng(run.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step));
  std::vector<uint8_t> drawn(P, 0);
  for (int k = 0; k < std::min(run.stragglers, P); ++k) {
    int r;
    do {
      r = static_cast<int>(rng() % static_cast<uint64_t>(P));
    } while (drawn[r]);
    drawn[r] = 1;
  }
  return drawn;
}

class PartialDriver final : public RankDriver {
 public:
  PartialDriver(SimWorld& world, const PartialRun& run,
                std::vector<std::unique_ptr<PartialAllreduce>>& objects)
      : world_(world),
        run_(run),
        objects_(objects),

        grad_(run.bytes / sizeof(float), 1.0f),
        ranks_(world.size()) {}

  void begin() {
    SimNetwork& net = world_.network();
    for (int r = 0; r < world_.size(); ++r) start_step(r, net.now_ns());
  }

  void run(int rank) override {
    SimNetwork& net = world_.network();
    Rank& me = ranks_[rank];
    world_.progress(rank);
    if (!error_.ok() || over()) return;
    // A rank that has done its measured steps goes on stepping, unmeasured, until every rank
    // has: the others' rounds need its posts (a majority round waits for its initiator) and its
    // results taken (result_depth), as in a training loop that is not over yet.
    if (!me.posted) {
      if (net.now_ns() < me.compute_end) return;
      const Status posted = objects_[rank]->post(grad_.data(), grad_.size(), DataType::kFloat32);
      if (!posted.ok()) {
        error_ = posted;
        return;
      }
      me.posted = true;
      world_.progress(rank);
    }
    bool got = false;
    for (;;) {
      Result<std::optional<RoundResult>> r = objects_[rank]->poll();
      if (!r.ok()) {
        error_ = r.status();
        return;
      }
      if (!r.value()) break;
      got = true;
      if (rank == 0 && me.step < run_.steps) record(*r.value());
    }
    if (!got) return;
    if (me.step < run_.steps) {
      const double took = static_cast<double>(net.reduced_by(rank) - me.step_start) / 1e3;
      (drawn(me.step)[rank] ? slow_ : fast_).add(took);
      if (me.step + 1 == run_.steps) ++finished_;
    }
    ++me.step;
    if (!over()) start_step(rank, net.reduced_by(rank));
  }

  bool over() const { return finished_ == world_.size() || !error_.ok(); }
  const Status& error() const { return error_; }
  // The ranks that have not finished, for an error: "rank 3 at step 7 (waiting for a round)".
  std::string unfinished() const {
    std::string out;
    for (int r = 0; r < world_.size() && out.size() < 200; ++r) {
      const Rank& me = ranks_[r];
      if (me.step >= run_.steps) continue;  // measured steps done
      out += (out.empty() ? "rank " : ", rank ") + std::to_string(r) + " at step " +
             std::to_string(me.step) + (me.posted ? " (waiting for a round)" : " (computing)");
    }
    return out;
  }

  void fill(PartialResult* out) const {
    out->fast_step_us = fast_.mean();
    out->slow_step_us = slow_.mean();
    out->rounds = rounds_;
    out->fresh_fraction = rounds_ ? fresh_sum_ / static_cast<double>(rounds_) : 0;
    out->stale_mean = ages_ ? age_sum_ / static_cast<double>(ages_) : 0;
    out->stale_max = age_max_;
  }

 private:
  struct Rank {
    int step = 0;
    bool posted = false;
    int64_t step_start = 0;
    int64_t compute_end = 0;
  };
  struct Mean {
    double sum = 0;
    uint64_t n = 0;
    void add(double v) {
      sum += v;
      ++n;
    }
    double mean() const { return n ? sum / static_cast<double>(n) : 0; }
  };

  void start_step(int rank, int64_t now) {
    Rank& me = ranks_[rank];
    me.posted = false;
    me.step_start = now;
    const double us = run_.compute_us + (drawn(me.step)[rank] ? run_.delay_us : 0);
    me.compute_end = now + static_cast<int64_t>(std::llround(us * 1e3));
    world_.network().schedule_run(rank, me.compute_end);
  }

  const std::vector<uint8_t>& drawn(int step) {
    while (static_cast<int>(drawn_.size()) <= step) {
      drawn_.push_back(draw_stragglers(run_, world_.size(), static_cast<int>(drawn_.size())));
    }
    return drawn_[step];
  }

  void record(const RoundResult& r) {
    ++rounds_;
    const int P = world_.size();
    fresh_sum_ += static_cast<double>(r.fresh_count()) / P;
    for (int q = 0; q < P; ++q) {
      const int age = r.age(q);
      if (age < 0) continue;
      age_sum_ += age;
      ++ages_;
      age_max_ = std::max(age_max_, age);
    }
  }

  SimWorld& world_;
  const PartialRun run_;
  std::vector<std::unique_ptr<PartialAllreduce>>& objects_;
  std::vector<std::vector<uint8_t>> drawn_;
  std::vector<float> grad_;
  std::vector<Rank> ranks_;
  Mean fast_, slow_;
  uint64_t rounds_ = 0, ages_ = 0;
  double fresh_sum_ = 0, age_sum_ = 0;
  int age_max_ = 0;
  int finished_ = 0;
  Status error_;
};

// Drives the activation measurement: the initiator posts at the start; every rank notes when it
// entered round 0.
class ActivationDriver final : public RankDriver {
 public:
  ActivationDriver(SimWorld& world, std::vector<std::unique_ptr<PartialAllreduce>>& objects,
                   size_t count, int initiator)
      : world_(world),
        objects_(objects),
        grad_(count, 1.0f),
        initiator_(initiator),
        entered_(world.size(), -1) {}

  void run(int rank) override {
    if (rank == initiator_ && posted_at_ < 0) {
      error_ = objects_[rank]->post(grad_.data(), grad_.size(), DataType::kFloat32);
      posted_at_ = world_.network().now_ns();
    }
    world_.progress(rank);
    if (entered_[rank] < 0 && objects_[rank]->stats().rounds_activated > 0) {
      entered_[rank] = world_.network().now_ns();
      ++entered_count_;
    }
  }
  bool over() const { return !error_.ok() || entered_count_ == world_.size(); }
  const Status& error() const { return error_; }
  ActivationResult result() const {
    ActivationResult out;
    double sum = 0;
    for (int r = 0; r < world_.size(); ++r) {
      const double us = static_cast<double>(entered_[r] - posted_at_) / 1e3;
      out.last_us = std::max(out.last_us, us);
      if (r != initiator_) sum += us;
    }
    out.mean_us = world_.size() > 1 ? sum / (world_.size() - 1) : 0;
    return out;
  }

 private:
  SimWorld& world_;
  std::vector<std::unique_ptr<PartialAllreduce>>& objects_;
  std::vector<float> grad_;
  const int initiator_;
  std::vector<int64_t> entered_;
  int entered_count_ = 0;
  int64_t posted_at_ = -1;
  Status error_;
};

}  // namespace

Result<std::vector<std::unique_ptr<PartialAllreduce>>> make_partial_objects(
    SimWorld& world, size_t count, PartialMode mode, const PartialOptions& options) {
  const int P = world.size();
  std::vector<std::unique_ptr<PartialAllreduce>> objects(P);
  std::vector<Status> made(P);
  world.on_every_rank([&](int r) {
    auto pa = PartialAllreduce::create(world.comm(r), count, DataType::kFloat32, mode, options);
    if (pa.ok()) {
      objects[r] = std::move(pa).value();
    } else {
      made[r] = pa.status();
    }
  });
  for (const Status& s : made) EC_RETURN_IF_ERROR(s);
  world.settle();
  return objects;
}

Result<ActivationResult> run_activation(SimWorld& world, size_t bytes, int initiator) {
  if (bytes % sizeof(float) != 0 || bytes == 0 || initiator < 0 || initiator >= world.size()) {
    return make_status(StatusCode::kInvalidArgument,
                       "sim: activation of %zu bytes (whole f32 elements, at least one) from rank "
                       "%d (0 .. %d)",
                       bytes, initiator, world.size() - 1);
  }
  EC_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<PartialAllreduce>> objects,
                      make_partial_objects(world, bytes / sizeof(float), PartialMode::solo(), {}));
  SimNetwork& net = world.network();
  ActivationDriver driver(world, objects, bytes / sizeof(float), initiator);
  net.schedule_run(initiator, net.now_ns());
  const bool over = net.run(driver, [&] { return driver.over(); });
  QuietDriver quiet(world);
  net.run(
      quiet, [&] { return net.in_flight() == 0; }, net.now_ns() + 10'000'000'000);
  world.on_every_rank([&](int r) { objects[r].reset(); });
  EC_RETURN_IF_ERROR(driver.error());
  if (!over) {
    return Status(StatusCode::kInternal, "sim: a rank never entered the activated round");
  }
  return driver.result();
}

Result<PartialResult> run_partial(SimWorld& world, const PartialRun& run) {
  EC_ASSIGN_OR_RETURN(PartialMode mode, parse_partial_mode(run.mode));
  if (run.bytes % sizeof(float) != 0 || run.bytes == 0 || run.steps < 1 || run.compute_us < 0 ||
      run.delay_us < 0 || run.stragglers < 0 || run.stragglers > world.size()) {
    return make_status(StatusCode::kInvalidArgument,
                       "sim: partial run of %zu bytes (whole f32 elements, at least one), %d steps "
                       "(at least 1), %d stragglers (0 .. %d), compute %g us and delay %g us (not "
                       "negative)",
                       run.bytes, run.steps, run.stragglers, world.size(), run.compute_us,
                       run.delay_us);
  }
  PartialOptions po;
  po.seed = run.seed;
  po.result_depth = run.result_depth;
  EC_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<PartialAllreduce>> objects,
                      make_partial_objects(world, run.bytes / sizeof(float), mode, po));

  SimNetwork& net = world.network();
  const NetworkStats before = net.stats();
  PartialDriver driver(world, run, objects);
  driver.begin();
  const auto wall = std::chrono::steady_clock::now();
  const bool over = net.run(driver, [&] { return driver.over(); });
  PartialResult out;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  const std::string unfinished = driver.unfinished();
  QuietDriver quiet(world);
  net.run(
      quiet, [] { return false; }, net.now_ns() + 10'000'000'000);  // 10 s of virtual time
  world.on_every_rank([&](int r) { objects[r].reset(); });
  if (!driver.error().ok()) return driver.error();
  if (!over) {
    return make_status(StatusCode::kInternal,
                       "sim: the event queue ran dry before every rank finished its steps: %s",
                       unfinished.c_str());
  }
  driver.fill(&out);
  out.connections = world.most_connections();
  out.network.messages = net.stats().messages - before.messages;
  out.network.bytes = net.stats().bytes - before.bytes;
  out.network.events = net.stats().events - before.events;
  return out;
}

}  // namespace eagercomm::sim
