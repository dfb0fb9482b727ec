// A partial allreduce with on_failure=continue in which one rank SIGKILLs itself at a point drawn
// from the seed, for tests/system/continue_test.sh (under eagercomm-run --keep-going). Every
// survivor checks its own share of the invariants and prints one line:
//   SURVIVOR rank=<rank at start> size=<size at the end> rounds=<n> digest=<hash of every result,
//            round numbers included> victim_posts=<the dead rank's posts in the results>
// The script checks that the survivors' lines agree (identical results everywhere).
// Element r of the vectors is rank r's: 1 per post, except the victim's post i, 2^i; element P
// counts posts. A survivor checks that its element sums to its posts (conservation), and that the
// victim's is 2^n - 1 (a prefix of its posts: its last contribution in every result or in none)
// with element P = all survivors' posts + n (summed over the survivors by the script, which only
// compares the digests: element P is in them).
// Exit codes: 0 checks passed, 1 a check failed or a call failed, 2 usage.
//
// usage: continue_main <seed> <mode> [steps] [hang]
//   hang: the victim SIGSTOPs itself instead (the survivors must declare it hung, after
//   EAGERCOMM_TIMEOUT); a child of it SIGKILLs it 3 timeouts later, so that the job ends.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/partial_allreduce.h"

using namespace eagercomm;

namespace {

enum class KillAt { kBeforePost, kAfterPost, kAfterPoll, kLater, kInFlush, kAfterFlush };

bool g_hang = false;
double g_timeout_s = 0;

[[noreturn]] void die() {
  std::fflush(stdout);
  if (g_hang) {
    const pid_t victim = ::getpid();
    if (::fork() == 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(3 * g_timeout_s + 1));
      ::kill(victim, SIGKILL);
      std::_Exit(0);
    }
    ::raise(SIGSTOP);
  }
  ::raise(SIGKILL);
  std::abort();
}

int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "continue_main: %s: %s\n", what, s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5 || (argc == 5 && std::string(argv[4]) != "hang")) {
    std::fprintf(stderr, "usage: continue_main <seed> <mode> [steps] [hang]\n");
    return 2;
  }
  g_hang = argc == 5;
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  Result<PartialMode> mode = parse_partial_mode(argv[2]);
  if (!mode.ok()) return fail("mode", mode.status());
  const int steps = argc >= 4 ? std::atoi(argv[3]) : 30;

  auto comm = Communicator::from_env();
  if (!comm.ok()) return fail("join", comm.status());
  Communicator& c = *comm.value();
  if (c.rank() == 0) {  // the script looks for this job's objects left in /dev/shm
    const char* job = std::getenv("EAGERCOMM_JOB_ID");
    std::printf("JOB=%s\n", job ? job : "");
    std::fflush(stdout);
  }
  g_timeout_s = std::chrono::duration<double>(c.configured_timeout()).count();
  const int P = c.size();
  const int me = c.rank();
  std::mt19937_64 draw(seed);
  const int victim = static_cast<int>(draw() % static_cast<uint64_t>(P));
  const auto at = static_cast<KillAt>(draw() % 6);
  const int kill_step = static_cast<int>(draw() % static_cast<uint64_t>(steps));
  const auto delay = std::chrono::microseconds(draw() % 20000);
  const bool dies = me == victim;

  const size_t count = static_cast<size_t>(P) + 1;
  PartialOptions o;
  o.on_failure = OnFailure::kContinue;
  o.seed = seed;
  o.sync_every = 5;
  auto made = PartialAllreduce::create(c, count, DataType::kFloat64, mode.value(), o);
  if (!made.ok()) return fail("create", made.status());
  PartialAllreduce& pa = *made.value();

  std::vector<double> sum(count, 0.0);
  uint64_t digest = 1469598103934665603ull;
  uint64_t rounds = 0;
  auto record = [&](RoundResult&& r) {
    if (r.round() != rounds) {
      std::fprintf(stderr, "continue_main: rank %d took round %llu, expected %llu\n", me,
                   static_cast<unsigned long long>(r.round()),
                   static_cast<unsigned long long>(rounds));
      std::exit(1);
    }
    ++rounds;
    auto v = r.as<double>();
    for (size_t i = 0; i < count; ++i) sum[i] += v[i];
    auto mix = [&digest](uint64_t x) { digest = (digest ^ x) * 1099511628211ull; };
    mix(r.round());
    for (double x : v) mix(static_cast<uint64_t>(std::llround(x * 1024)));
  };
  auto kill_later = [&] {
    std::thread([delay] {
      std::this_thread::sleep_for(delay);
      die();
    }).detach();
  };

  std::mt19937_64 pace(seed * 31 + static_cast<uint64_t>(me));
  int posts = 0;
  for (int step = 0; step < steps; ++step) {
    if (dies && step == kill_step && at == KillAt::kBeforePost) die();
    if (dies && step == kill_step && at == KillAt::kLater) kill_later();
    std::vector<double> grad(count, 0.0);
    grad[me] = dies ? std::ldexp(1.0, posts) : 1.0;
    grad[P] = 1.0;
    Status s = pa.post(grad.data(), count, DataType::kFloat64);
    if (!s.ok()) return fail("post", s);
    ++posts;
    if (dies && step == kill_step && at == KillAt::kAfterPost) die();
    if (pace() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(pace() % 2000));
    bool any = false;
    for (;;) {
      auto got = pa.poll();
      if (!got.ok()) return fail("poll", got.status());
      if (!got.value()) break;
      record(std::move(*got.value()));
      any = true;
    }
    if (!any && step % 3 == 2) {
      auto one = pa.wait();
      if (!one.ok()) return fail("wait", one.status());
      record(std::move(one).value());
    }
    if (dies && step == kill_step && at == KillAt::kAfterPoll) die();
  }
  if (dies && at == KillAt::kInFlush) kill_later();
  Result<uint64_t> first = pa.flush(record);
  if (!first.ok()) return fail("flush", first.status());
  if (dies) die();  // kAfterFlush (and the rest, had the kill point not come)
  // The survivors that returned from the first flush before the victim died there meet the
  // failure in this one.
  Result<uint64_t> second = pa.flush(record);
  if (!second.ok()) return fail("second flush", second.status());

  int bad = 0;
  if (sum[me] != posts) {
    std::fprintf(stderr, "continue_main: rank %d posted %d times, the results hold %.0f\n", me,
                 posts, sum[me]);
    bad = 1;
  }
  const double v = sum[victim];
  const long included = std::lround(std::log2(v + 1));
  if (v != std::ldexp(1.0, static_cast<int>(included)) - 1) {
    std::fprintf(stderr,
                 "continue_main: the dead rank's posts in the results (%.0f) are not a "
                 "prefix of its posts\n",
                 v);
    bad = 1;
  }
  if (c.size() != P - 1 || pa.size() != P - 1) {
    std::fprintf(stderr, "continue_main: rank %d ends with %d ranks (object: %d), expected %d\n",
                 me, c.size(), pa.size(), P - 1);
    bad = 1;
  }
  std::printf(
      "SURVIVOR rank=%d size=%d rounds=%llu digest=%016llx victim_posts=%ld "
      "posts_total=%.0f\n",
      me, c.size(), static_cast<unsigned long long>(rounds),
      static_cast<unsigned long long>(digest), included, sum[P]);
  std::printf("POSTS rank=%d posts=%d\n", me, posts);
  std::fflush(stdout);
  return bad;
}
