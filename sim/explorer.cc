#include "sim/explorer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "collectives/config.h"
#include "collectives/partial_allreduce.h"
#include "runtime/hash.h"
#include "runtime/log.h"
#include "sim/partial_sim.h"
#include "sim/sim_world.h"

namespace eagercomm::sim {
namespace {

// A draw from (seed, a, b) that does not depend on the order of other draws: compute times of a
// rank's step are the same whatever the schedule did before.
double unit(uint64_t seed, uint64_t a, uint64_t b) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull ^ (a << 32) ^ (b * 0xbf58476d1ce4e5b9ull));
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int64_t ns_of(double us) { return static_cast<int64_t>(std::llround(us * 1e3)); }

// What every rank receives, and the first broken invariant each rank saw. Ranks write only their
// own entries (the flush runs on one thread per rank).
class Ledger {
 public:
  Ledger(const ExploreCase& c, PartialMode mode)
      : c_(c), mode_(mode), hashes_(c.ranks), sums_(c.ranks), failures_(c.ranks) {
    for (auto& s : sums_) s.assign(c.count, 0.0);
  }

  // Rank r's gradient of its post number `post`: 1 in element r (so the sum counts r's posts),
  // post + 1 in element P + r, small integers elsewhere. Every sum stays exact in f32.
  static void gradient(const ExploreCase& c, int r, int post, std::vector<float>* g) {
    const int P = c.ranks;
    g->assign(c.count, 0.0f);
    (*g)[r] = 1.0f;
    (*g)[P + r] = static_cast<float>(post + 1);
    for (size_t j = 2 * P; j < c.count; ++j) {
      (*g)[j] = static_cast<float>((static_cast<size_t>(r) * 7 + post * 3 + j) % 5);
    }
  }

  void record(int rank, const RoundResult& res, bool in_flush) {
    std::string& failed = failures_[rank];
    if (!failed.empty()) return;
    const int P = c_.ranks;
    auto fail = [&](std::string what) {
      failed =
          "rank " + std::to_string(rank) + ", round " + std::to_string(res.round()) + ": " + what;
    };
    if (res.round() != hashes_[rank].size()) {
      return fail("received out of order (expected round " + std::to_string(hashes_[rank].size()) +
                  ")");
    }
    if (res.count() != c_.count || res.ranks() != P) return fail("wrong count or ranks");
    const std::span<const float> d = res.as<float>();
    uint64_t h = fnv1a(d.data(), d.size_bytes()) ^ res.round();
    int contributors = 0;
    for (int q = 0; q < P; ++q) {
      const int posts = res.posts(q), age = res.age(q);
      const bool fresh = res.fresh(q);
      if (d[q] != static_cast<float>(posts)) {
        return fail("metadata against data: rank " + std::to_string(q) + " folded " +
                    std::to_string(posts) + " posts, the sum counts " + std::to_string(d[q]));
      }
      // age is the oldest post's: a fresh contribution may carry older posts too, but one whose
      // oldest post is of this round is fresh, and a fresh one with a single post is of age 0.
      if ((posts == 0) != (age < 0) || (age == 0 && !fresh) || (fresh && posts == 1 && age != 0)) {
        return fail("metadata: rank " + std::to_string(q) + " posts " + std::to_string(posts) +
                    ", age " + std::to_string(age) + ", fresh " + std::to_string(fresh));
      }
      contributors += posts > 0;
      const int64_t m[3] = {posts, age, fresh};
      h = h * kFnv1aPrime ^ fnv1a(m, sizeof(m));
    }
    if (contributors != res.contributors()) return fail("contributors() disagrees with posts()");
    if (c_.sync_every > 0 && !c_.post_without_result &&
        res.max_age() > static_cast<int>(c_.sync_every) - 1) {
      return fail("staleness bound: age " + std::to_string(res.max_age()) + " with sync_every " +
                  std::to_string(c_.sync_every));
    }
    if (!in_flush) {
      const bool synchronous = mode_.kind == PartialKind::kSync ||
                               (c_.sync_every > 0 && (res.round() + 1) % c_.sync_every == 0);
      const int need = synchronous ? P : mode_.kind == PartialKind::kQuorum ? mode_.quorum : 1;
      if (res.fresh_count() < need) {
        return fail("mode guarantee: " + std::to_string(res.fresh_count()) +
                    " fresh contributions, at least " + std::to_string(need) + " required");
      }
    }
    hashes_[rank].push_back(h);
    for (size_t j = 0; j < d.size(); ++j) sums_[rank][j] += d[j];
  }

  const std::vector<uint64_t>& hashes(int rank) const { return hashes_[rank]; }
  const std::vector<double>& sums(int rank) const { return sums_[rank]; }
  std::string first_failure() const {
    for (const std::string& f : failures_) {
      if (!f.empty()) return f;
    }
    return {};
  }

 private:
  const ExploreCase& c_;
  const PartialMode mode_;
  std::vector<std::vector<uint64_t>> hashes_;
  std::vector<std::vector<double>> sums_;
  std::vector<std::string> failures_;
};

class ExploreDriver final : public RankDriver {
 public:
  ExploreDriver(SimWorld& world, const ExploreCase& c,
                std::vector<std::unique_ptr<PartialAllreduce>>& objects, Ledger& ledger)
      : world_(world), c_(c), objects_(objects), ledger_(ledger), ranks_(c.ranks) {}

  void begin() {
    for (int r = 0; r < c_.ranks; ++r) start_step(r);
    if (c_.death_rank >= 0) world_.network().schedule_run(c_.death_rank, ns_of(c_.death_us));
  }

  void run(int rank) override {
    SimNetwork& net = world_.network();
    if (net.dead(rank)) return;
    if (rank == destroyed_) {  // its communicator lives on (its notices go out)
      world_.progress(rank);
      return;
    }
    if (rank == c_.death_rank && !killed_ && net.now_ns() >= ns_of(c_.death_us) && !finished()) {
      // The rank leaves: its process dies, or it destroys its object (a normal leave that the
      // others must hear of through the object's closed notices).
      if (c_.destroy_instead) {
        objects_[rank]->destroy();
        destroyed_ = rank;
      } else {
        net.kill(rank, ns_of(c_.detect_us));
      }
      killed_ = true;
      return;
    }
    Rank& me = ranks_[rank];
    world_.progress(rank);
    if (!me.error.ok()) return;
    // A rank that has done its steps goes on stepping until every rank has: the others' rounds
    // may need its posts (sync, quorum and majority rounds), as in a training loop not over yet.
    if (!me.posted && (me.step < c_.steps || !finished())) {
      if (net.now_ns() < me.compute_end) return;
      Ledger::gradient(c_, rank, me.posts, &grad_);
      const Status posted = objects_[rank]->post(grad_.data(), grad_.size(), DataType::kFloat32);
      if (!posted.ok()) {
        me.error = posted;
        return;
      }
      ++me.posts;
      me.posted = true;
      me.since_post = 0;
      world_.progress(rank);
    }
    for (;;) {
      Result<std::optional<RoundResult>> r = objects_[rank]->poll();
      if (!r.ok()) {
        me.error = r.status();
        return;
      }
      if (!r.value()) break;
      ledger_.record(rank, *r.value(), false);
      ++me.since_post;
    }
    // EagerSgd's loop takes at least one result after each post (waiting if none is there);
    // the other loop posts whenever its compute is done and takes what has come.
    if (me.posted && (c_.post_without_result || me.since_post > 0)) {
      me.posted = false;
      ++me.step;
      if (me.step < c_.steps || !finished()) start_step(rank);
    }
  }

  // Has done its steps or stopped at an error.
  bool done(int rank) const { return ranks_[rank].step >= c_.steps || !ranks_[rank].error.ok(); }
  // Every live rank is done.
  bool finished() const {
    for (int r = 0; r < c_.ranks; ++r) {
      if (!gone(r) && !done(r)) return false;
    }
    return true;
  }
  // Died, or destroyed its object.
  bool gone(int rank) const { return world_.network().dead(rank) || rank == destroyed_; }
  bool killed() const { return killed_; }
  const Status& error(int rank) const { return ranks_[rank].error; }
  int posts(int rank) const { return ranks_[rank].posts; }
  std::string where(int rank) const {
    const Rank& me = ranks_[rank];
    return "rank " + std::to_string(rank) + " at step " + std::to_string(me.step) + " of " +
           std::to_string(c_.steps) + (me.posted ? " (waiting for a round)" : " (computing)");
  }

 private:
  struct Rank {
    int step = 0;
    int posts = 0;
    bool posted = false;
    int since_post = 0;  // results taken since its last post
    int64_t compute_end = 0;
    Status error;
  };

  void start_step(int rank) {
    SimNetwork& net = world_.network();
    Rank& me = ranks_[rank];
    double us = c_.compute_us * (0.2 + 2.8 * unit(c_.seed, rank, me.step));
    // The step's straggler: one rank drawn per step, if the step is drawn.
    if (unit(c_.seed, 1000 + me.step, 1) < c_.straggle &&
        static_cast<int>(unit(c_.seed, 2000 + me.step, 2) * c_.ranks) == rank) {
      us *= 10;
    }
    me.compute_end = net.now_ns() + ns_of(us);
    if (rank == c_.stall_rank && me.step == c_.stall_step) net.busy(rank, ns_of(c_.stall_us));
    net.schedule_run(rank, me.compute_end);
  }

  SimWorld& world_;
  const ExploreCase& c_;
  std::vector<std::unique_ptr<PartialAllreduce>>& objects_;
  Ledger& ledger_;
  std::vector<Rank> ranks_;
  std::vector<float> grad_;
  bool killed_ = false;
  int destroyed_ = -1;
};

Status violation(const ExploreCase& c, const std::string& what) {
  return make_status(StatusCode::kInternal, "seed %llu: %s; case: %s",
                     static_cast<unsigned long long>(c.seed), what.c_str(), c.describe().c_str());
}

}  // namespace

std::string ExploreCase::describe() const {
  char buf[640];
  std::snprintf(buf, sizeof(buf),
                "%d ranks, %s, late=%s, sync_every %u, result_depth %u, %zu x f32, %d x %zu B "
                "slots, algo %s, %d steps of %.0f us (straggle %.2f)%s, jitter %lld ns%s",
                ranks, mode.c_str(), drop_late ? "drop" : "carry", sync_every, result_depth, count,
                slots, slot_bytes, algo.c_str(), steps, compute_us, straggle,
                post_without_result ? ", posting without results" : "",
                static_cast<long long>(jitter_ns), shuffle ? ", shuffled" : "");
  std::string out = buf;
  if (stall_rank >= 0) {
    std::snprintf(buf, sizeof(buf), ", rank %d stalls %.0f us at step %d", stall_rank, stall_us,
                  stall_step);
    out += buf;
  }
  if (death_rank >= 0 && destroy_instead) {
    std::snprintf(buf, sizeof(buf), ", rank %d destroys its object at %.0f us", death_rank,
                  death_us);
    out += buf;
  } else if (death_rank >= 0) {
    std::snprintf(buf, sizeof(buf), ", rank %d dies at %.0f us (detected %.0f us later)",
                  death_rank, death_us, detect_us);
    out += buf;
  }
  return out;
}

void quiet_explorer_logs() {
  if (std::getenv("EAGERCOMM_LOG_LEVEL") != nullptr) return;
  (void)Config::process();  // first, so that it does not set the level again later
  RuntimeConfig errors_only;
  errors_only.log_level = LogLevel::kError;
  (void)log_configure(errors_only);
}

ExploreCase draw_case(uint64_t seed) {
  std::mt19937_64 rng(seed * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull);
  auto below = [&](uint64_t n) { return static_cast<int>(rng() % n); };
  auto chance = [&](double p) { return static_cast<double>(rng() >> 11) * 0x1.0p-53 < p; };
  ExploreCase c;
  c.seed = seed;
  c.ranks = 2 + below(8);
  const int m = below(10);
  if (m < 3) {
    c.mode = "solo";
  } else if (m < 5) {
    c.mode = "majority";
  } else if (m < 7) {
    c.mode = "quorum:" + std::to_string(1 + below(c.ranks));
  } else if (m < 8) {
    c.mode = "sync";
  } else {
    c.mode = "adaptive";
  }
  c.drop_late = chance(0.2);
  c.post_without_result = chance(0.2);
  c.sync_every = chance(0.3) ? 2 + below(4) : 0;
  c.result_depth = 1 + below(6);
  const size_t base = 2 * static_cast<size_t>(c.ranks) + 2;
  const size_t extra[] = {0, 1000, 20000};
  c.count = base + extra[below(3)];
  const int slots[] = {2, 4, 8};
  c.slots = slots[below(3)];
  const size_t slot_bytes[] = {4096, 16384, 256 * 1024};
  c.slot_bytes = slot_bytes[below(3)];
  const char* algos[] = {"auto", "ring", "rd"};
  c.algo = algos[below(3)];
  c.steps = 2 + below(9);
  c.compute_us = 20 + below(480);
  c.straggle = chance(0.5) ? 0.3 + 0.7 * (static_cast<double>(below(100)) / 100) : 0;
  const int64_t jitter[] = {0, 1000, 20000, 200000};
  c.jitter_ns = jitter[below(4)];
  c.shuffle = chance(0.5);
  if (chance(0.25)) {
    c.stall_rank = below(c.ranks);
    c.stall_step = below(c.steps);
    c.stall_us = c.compute_us * (1 + below(20));
  }
  if (chance(0.15)) {
    c.death_rank = below(c.ranks);
    c.death_us = c.compute_us * below(3 * c.steps + 1);
    c.detect_us = below(2000);
  }
  // Drawn last, so that the draws above stay what they were for every seed.
  if (c.death_rank >= 0 && chance(0.4)) c.destroy_instead = true;
  // Some worlds large enough that ranks have peers outside their partners (r +- 2^k).
  if (chance(0.1)) {
    const int more = 10 + below(15) - c.ranks;
    c.ranks += more;
    c.count += 2 * static_cast<size_t>(more);  // still 2 elements per rank, 2 more
  }
  // A third of the solo worlds run deadline rounds instead (T from a few us, so that rounds
  // go without the late ranks, to longer than a step, and auto).
  if (c.mode == "solo" && chance(1.0 / 3)) {
    const char* t[] = {"5us", "50us", "500us", "auto"};
    c.mode = std::string("deadline:") + t[below(4)];
  }
  return c;
}

Result<ExploreOutcome> explore(const ExploreCase& c) {
  EC_ASSIGN_OR_RETURN(PartialMode mode, parse_partial_mode(c.mode));
  const int P = c.ranks;
  if (P < 2 || c.count < 2 * static_cast<size_t>(P) || c.steps < 1) {
    return make_status(StatusCode::kInvalidArgument,
                       "explore: %d ranks (at least 2), %zu elements (at least 2 per rank), %d "
                       "steps (at least 1)",
                       P, c.count, c.steps);
  }
  WorldOptions wo;
  wo.ranks = P;
  wo.link = loggp_preset("hdr").value();
  wo.config = {{"EAGERCOMM_SLOTS", std::to_string(c.slots)},
               {"EAGERCOMM_SLOT_BYTES", std::to_string(c.slot_bytes)},
               {"EAGERCOMM_ALLREDUCE_ALGO", c.algo},
               // The flush runs on the real clock: a hang there fails instead of hanging.
               {"EAGERCOMM_TIMEOUT", "30s"}};
  EC_ASSIGN_OR_RETURN(std::unique_ptr<SimWorld> world, SimWorld::create(wo));
  SimNetwork& net = world->network();

  PartialOptions po;
  po.late = c.drop_late ? LatePolicy::kDrop : LatePolicy::kCarry;
  po.sync_every = c.sync_every;
  po.seed = c.seed;
  po.result_depth = c.result_depth;
  EC_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<PartialAllreduce>> objects,
                      make_partial_objects(*world, c.count, mode, po));

  net.perturb({c.seed, c.jitter_ns, c.shuffle, c.corrupt_from});
  Ledger ledger(c, mode);
  ExploreDriver driver(*world, c, objects, ledger);
  driver.begin();
  // Generous: every step a straggler's, the stall, and a second of slack.
  const int64_t limit = ns_of(c.steps * c.compute_us * 30 + c.stall_us + c.death_us) +
                        ns_of(c.detect_us) + 1'000'000'000;
  const bool finished = net.run(
      driver, [&] { return driver.finished(); }, limit);
  ExploreOutcome out;
  out.died = driver.killed();
  // Whose rounds are reported: rank 0, or the next rank if rank 0 died.
  const int reference = out.died && driver.gone(0) ? (c.death_rank + 1) % P : 0;
  std::string broken;
  if (!finished) {
    for (int r = 0; r < P && broken.size() < 300; ++r) {
      if (driver.gone(r) || driver.done(r)) continue;
      broken += (broken.empty() ? "" : ", ") + driver.where(r);
    }
    broken = "no progress within " + std::to_string(limit / 1'000'000) + " ms: " + broken;
  }
  if (broken.empty() && out.died) {
    // Every survivor hears of the death: ranks still waiting for rounds get an error, none waits
    // for ever. Let the detection and the failure's notices play out first.
    QuietDriver quiet(*world);
    net.run(
        quiet, [] { return false; }, net.now_ns() + ns_of(c.detect_us) + 100'000'000);
    for (int r = 0; r < P && broken.empty(); ++r) {
      if (driver.gone(r)) continue;
      const Status& e = driver.error(r);
      if (e.ok()) continue;
      ++out.told_of_death;
      // The error names the dead rank (directly, or through the peer that reported it).
      if (e.code() != StatusCode::kPeerFailed ||
          e.message().find("rank " + std::to_string(c.death_rank)) == std::string::npos) {
        broken = "rank " + std::to_string(r) + " failed with " + e.to_string() + " after rank " +
                 std::to_string(c.death_rank) +
                 (c.destroy_instead ? " destroyed its object" : " died");
      }
    }
  }
  out.virtual_ms = static_cast<double>(net.now_ns()) / 1e6;
  out.timed_rounds = ledger.hashes(reference).size();
  if (broken.empty() && !out.died) {
    // Let what is in flight arrive, then flush on every rank: the results then add up to
    // every post.
    QuietDriver quiet(*world);
    net.run(
        quiet, [&] { return net.in_flight() == 0; }, net.now_ns() + 1'000'000'000);
    std::vector<Result<uint64_t>> flushed(P, Status(StatusCode::kInternal, "not flushed"));
    world->on_every_rank([&](int r) {
      flushed[r] = objects[r]->flush([&, r](RoundResult&& res) { ledger.record(r, res, true); });
    });
    broken = ledger.first_failure();
    for (int r = 0; r < P && broken.empty(); ++r) {
      if (!flushed[r].ok()) {
        broken =
            "rank " + std::to_string(r) + "'s flush failed: " + flushed[r].status().to_string();
      } else if (flushed[r].value() != flushed[0].value() ||
                 ledger.hashes(r).size() != flushed[r].value() + 1) {
        broken = "rank " + std::to_string(r) + " flushed to round " +
                 std::to_string(flushed[r].value()) + " having received " +
                 std::to_string(ledger.hashes(r).size()) + " rounds (rank 0: to round " +
                 std::to_string(flushed[0].value()) + ")";
      }
    }
  }
  if (broken.empty()) broken = ledger.first_failure();
  // Identical replicas: the same round is the same on every rank (a dead rank's included, up to
  // its death; survivors of a death may have received different numbers of rounds).
  for (int r = 1; r < P && broken.empty(); ++r) {
    const auto& a = ledger.hashes(0);
    const auto& b = ledger.hashes(r);
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (a[i] != b[i]) {
        broken = "identical replicas: round " + std::to_string(i) +
                 " differs between rank 0 and "
                 "rank " +
                 std::to_string(r);
        break;
      }
    }
  }
  // Conservation. Each rank's count element adds up to its posts (less what was dropped); the
  // others to at most the posts' sum, and exactly it without drops or deaths.
  std::vector<double> posted(c.count, 0.0);
  std::vector<float> g;
  for (int r = 0; r < P; ++r) {
    for (int k = 0; k < driver.posts(r); ++k) {
      Ledger::gradient(c, r, k, &g);
      for (size_t j = 0; j < c.count; ++j) posted[j] += g[j];
    }
  }
  for (int r = 0; r < P && broken.empty(); ++r) {
    if (driver.gone(r)) continue;
    const std::vector<double>& sums = ledger.sums(r);
    const bool exact = !out.died && !c.drop_late;
    for (size_t j = 0; j < c.count; ++j) {
      double want = posted[j];
      if (!out.died && j < static_cast<size_t>(P)) {
        want -= static_cast<double>(objects[j]->stats().dropped_posts);
      }
      const bool ok =
          (exact || j < static_cast<size_t>(P)) && !out.died ? sums[j] == want : sums[j] <= want;
      if (!ok) {
        broken = "conservation: rank " + std::to_string(r) + "'s results add up to " +
                 std::to_string(sums[j]) + " in element " + std::to_string(j) + ", the posts to " +
                 std::to_string(want);
        break;
      }
    }
  }
  out.rounds = ledger.hashes(reference).size();
  // Teardown on the real clock (collective).
  world->on_every_rank([&](int r) { objects[r].reset(); });
  if (!broken.empty()) return violation(c, broken);
  return out;
}

}  // namespace eagercomm::sim
