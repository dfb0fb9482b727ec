// Fault injection for tests/system/faults_test.sh: one rank (the victim, the last) misbehaves in
// the way a scenario names, and every rank reports what it saw on stdout:
//   DETECTED rank=<me> code=<status code> seconds=<since the last success> message=<message>
//   DONE rank=<me> rounds=<n>
// Exit codes: 0 the job completed and its results were right; 3 an error was reported (the
// script decides whether it was the right one); 1 something else went wrong (wrong results, a
// failed warm-up, bad usage).
//
// usage (under eagercomm-run):
//   fault_main kill-partial           the victim SIGKILLs itself between solo partial rounds
//   fault_main kill-bootstrap         the victim SIGKILLs itself while the job bootstraps
//   fault_main stop <secs> <sync|solo> <rounds>
//                                     the victim SIGSTOPs itself for <secs> (a child of it sends
//                                     SIGCONT) in the middle of <rounds> allreduces or solo rounds
//   fault_main hang <secs> <rounds>   as `stop ... sync`, but the allreduces wait forever: only
//                                     the hung verdict (liveness_watchdog.h) can end them; the
//                                     survivors then wait 1 s and print AFTER rank=<me>
//                                     code=... message=... for one more barrier
//   fault_main straggle <secs>        the victim computes for <secs> before an allreduce
//   fault_main abort                  rank 0 aborts from a second thread while its main thread
//                                     waits in an allreduce the victim joins late
//   fault_main loop <secs> <sync|solo>
//                                     no fault of its own: allreduces or solo rounds for about
//                                     <secs> (the fault comes from outside, e.g. a network link
//                                     taken down); prints RUNNING rank=<me> once warmed up, so a
//                                     script knows when traffic flows
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/partial_allreduce.h"

using namespace eagercomm;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kCount = 4096;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int report(int rank, const Status& s, Clock::time_point last_ok) {
  std::printf("DETECTED rank=%d code=%s seconds=%.3f message=%s\n", rank,
              std::string(status_code_name(s.code())).c_str(), since(last_ok), s.message().c_str());
  std::fflush(stdout);
  return 3;
}

int done(int rank, int rounds) {
  std::printf("DONE rank=%d rounds=%d\n", rank, rounds);
  std::fflush(stdout);
  return 0;
}

// Stops this process for `secs`: a child sends the SIGCONT (the launcher does not know).
void stop_for(double secs) {
  const pid_t child = fork();
  if (child == 0) {
    usleep(static_cast<useconds_t>(secs * 1e6));
    kill(getppid(), SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
  if (child > 0) waitpid(child, nullptr, 0);
}

// Allreduces of rank-dependent values, each result checked. With max_secs > 0, also ends once
// rank 0 has seen max_secs pass: every rank must call the same number of allreduces, so rank 0's
// vote travels in an extra element of each allreduce and all ranks stop after the same round.
int run_sync(Communicator& c, int rounds, int stop_round, double stop_secs, double max_secs = 0,
             std::chrono::nanoseconds call_timeout = kConfiguredTimeout) {
  const int victim = c.size() - 1;
  const size_t n = max_secs > 0 ? kCount + 1 : kCount;
  std::vector<float> buf(n);
  const auto start = Clock::now();
  auto last_ok = start;
  for (int i = 0; i < rounds; ++i) {
    if (c.rank() == victim && i == stop_round) stop_for(stop_secs);
    for (size_t k = 0; k < kCount; ++k) buf[k] = static_cast<float>(c.rank() + i + (k & 7));
    if (n > kCount) buf[kCount] = c.rank() == 0 && since(start) >= max_secs ? 1.0f : 0.0f;
    Status s =
        c.allreduce(buf.data(), buf.data(), n, DataType::kFloat32, ReduceOp::kSum, call_timeout);
    if (!s.ok()) return report(c.rank(), s, last_ok);
    const int p = c.size();
    for (size_t k = 0; k < kCount; ++k) {
      const float want = static_cast<float>(p * (p - 1) / 2 + p * (i + static_cast<int>(k & 7)));
      if (buf[k] != want) {
        std::printf("WRONG rank=%d round=%d element=%zu got=%g want=%g\n", c.rank(), i, k, buf[k],
                    want);
        return 1;
      }
    }
    last_ok = Clock::now();
    if (n > kCount && buf[kCount] != 0.0f) return done(c.rank(), i + 1);
    usleep(5000);
  }
  return done(c.rank(), rounds);
}

// Solo rounds; every rank posts 1.0 per element per round, so after flush the results add up
// to size * rounds on every rank (conservation). `action` runs on the victim before round
// `at`. With max_secs > 0, each rank also stops posting once max_secs have passed; the ranks'
// post counts then differ, and the results must add up to their sum.
int run_solo(Communicator& c, int rounds, int at, const std::function<void()>& action,
             double max_secs = 0) {
  const int victim = c.size() - 1;
  const size_t n = 1024;
  auto pa = PartialAllreduce::create(c, n, DataType::kFloat32, PartialMode::solo());
  if (!pa.ok()) {
    std::fprintf(stderr, "create: %s\n", pa.status().to_string().c_str());
    return 1;
  }
  std::vector<float> grad(n, 1.0f);
  double total = 0;
  const auto start = Clock::now();
  auto last_ok = start;
  int posted = 0;
  auto take = [&](RoundResult&& r) {
    total += r.as<float>()[0];
    last_ok = Clock::now();
  };
  for (int i = 0; i < rounds; ++i) {
    if (max_secs > 0 && since(start) >= max_secs) break;
    if (c.rank() == victim && i == at) action();
    Status s = pa.value()->post(grad.data(), n, DataType::kFloat32);
    if (!s.ok()) return report(c.rank(), s, last_ok);
    ++posted;
    for (;;) {
      auto r = pa.value()->poll();
      if (!r.ok()) return report(c.rank(), r.status(), last_ok);
      if (!r.value()) break;
      take(std::move(*r.value()));
    }
    auto r = pa.value()->wait();
    if (!r.ok()) return report(c.rank(), r.status(), last_ok);
    take(std::move(r.value()));
    usleep(5000);
  }
  auto f = pa.value()->flush(take);
  if (!f.ok()) return report(c.rank(), f.status(), last_ok);
  double want = static_cast<double>(c.size()) * rounds;
  if (max_secs > 0) {
    // Every post, on every rank: the sum of the ranks' counts.
    double all = posted;
    Status s = c.allreduce(&all, &all, 1, DataType::kFloat64, ReduceOp::kSum);
    if (!s.ok()) return report(c.rank(), s, last_ok);
    want = all;
  }
  if (total != want) {
    std::printf("WRONG rank=%d total=%g want=%g\n", c.rank(), total, want);
    return 1;
  }
  return done(c.rank(), posted);
}

int warm_up(Communicator& c) {
  std::vector<float> buf(kCount, 1.0f);
  for (int i = 0; i < 3; ++i) {
    Status s = c.allreduce(buf.data(), buf.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) {
      std::fprintf(stderr, "warm-up allreduce %d: %s\n", i, s.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

int kill_bootstrap() {
  const char* rank_text = std::getenv("EAGERCOMM_RANK");
  const char* size_text = std::getenv("EAGERCOMM_SIZE");
  const int rank = rank_text ? std::atoi(rank_text) : 0;
  const int size = size_text ? std::atoi(size_text) : 1;
  const auto start = Clock::now();
  if (rank == size - 1) {
    // Somewhere inside the join: the store connection, the transport's set-up, the exchange.
    std::thread([] {
      std::random_device rd;
      usleep(std::uniform_int_distribution<int>(0, 30000)(rd));
      raise(SIGKILL);
    }).detach();
  }
  auto comm = Communicator::from_env();
  if (!comm.ok()) return report(rank, comm.status(), start);
  std::vector<float> buf(kCount, 1.0f);
  for (int i = 0; i < 1000; ++i) {
    Status s =
        comm.value()->allreduce(buf.data(), buf.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) return report(rank, s, start);
    usleep(2000);
  }
  std::printf("NOTDETECTED rank=%d\n", rank);
  return 1;
}

int straggle(Communicator& c, double secs) {
  std::vector<float> buf(kCount, 1.0f);
  auto last_ok = Clock::now();
  if (c.rank() == c.size() - 1) usleep(static_cast<useconds_t>(secs * 1e6));
  Status s = c.allreduce(buf.data(), buf.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
  if (!s.ok()) return report(c.rank(), s, last_ok);
  return done(c.rank(), 1);
}

int abort_scenario(Communicator& c) {
  std::vector<float> buf(kCount, 1.0f);
  const auto start = Clock::now();
  if (c.rank() == c.size() - 1) usleep(3000000);  // late: the others wait for it
  std::thread aborter;
  if (c.rank() == 0) {
    aborter = std::thread([&c] {
      usleep(500000);
      c.abort("operator pressed stop");
    });
  }
  Status s = c.allreduce(buf.data(), buf.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
  if (aborter.joinable()) aborter.join();
  if (!s.ok()) return report(c.rank(), s, start);
  return done(c.rank(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: fault_main kill-partial|kill-bootstrap|stop|hang|straggle|abort|loop ...\n");
    return 1;
  }
  const std::string scenario = argv[1];
  if (scenario == "kill-bootstrap") return kill_bootstrap();
  auto comm = Communicator::from_env();
  if (!comm.ok()) {
    std::fprintf(stderr, "from_env: %s\n", comm.status().to_string().c_str());
    return 1;
  }
  Communicator& c = *comm.value();
  if (warm_up(c) != 0) return 1;
  if (scenario == "kill-partial") {
    return run_solo(c, 1000, 3, [] { raise(SIGKILL); });
  }
  if (scenario == "stop" && argc == 5) {
    const double secs = std::atof(argv[2]);
    const std::string mode = argv[3];
    const int rounds = std::atoi(argv[4]);
    if (mode == "sync") return run_sync(c, rounds, 3, secs);
    if (mode == "solo") return run_solo(c, rounds, 3, [secs] { stop_for(secs); });
  }
  if (scenario == "hang" && argc == 4) {
    const int rc = run_sync(c, std::atoi(argv[3]), 3, std::atof(argv[2]), 0, kWaitForever);
    if (c.rank() == c.size() - 1) return rc;
    // A failed collective's error may reach a rank before the verdict does (from a rank that is
    // not its partner): give the verdict a second, then start one more collective. A rank that
    // marked the victim gone fails it at once with its own record of why ("rank 7 is not
    // responding: ..."); one that did not would wait for the others' errors.
    sleep(1);
    const Status after = c.barrier(std::chrono::seconds(5));
    std::printf("AFTER rank=%d code=%s message=%s\n", c.rank(),
                std::string(status_code_name(after.code())).c_str(), after.message().c_str());
    std::fflush(stdout);
    return rc;
  }
  if (scenario == "straggle" && argc == 3) return straggle(c, std::atof(argv[2]));
  if (scenario == "abort") return abort_scenario(c);
  if (scenario == "loop" && argc == 4) {
    const double secs = std::atof(argv[2]);
    const std::string mode = argv[3];
    if (secs > 0 && (mode == "sync" || mode == "solo")) {
      std::printf("RUNNING rank=%d\n", c.rank());
      std::fflush(stdout);
      const int forever = std::numeric_limits<int>::max();
      if (mode == "sync") return run_sync(c, forever, -1, 0, secs);
      return run_solo(
          c, forever, -1, [] {}, secs);
    }
  }
  std::fprintf(stderr, "fault_main: bad arguments for scenario '%s'\n", scenario.c_str());
  return 1;
}
