// A job in which one rank dies: rank `victim` (the last by default) SIGKILLs itself in the
// middle of its allreduces, the way the OOM killer or a node failure would. Every other rank
// must get an error from the collective that names the dead rank, well within EAGERCOMM_TIMEOUT,
// and report it on stdout:
//   DETECTED rank=<me> code=<status code> seconds=<elapsed> message=<message>
// then leave with exit code 3 (the failure is expected, the job is not fine).
// Exit code 1: the error did not come, came late, or does not name the victim.
// usage (under a launcher): dead_peer_main [count]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/communicator.h"

using namespace eagercomm;

int main(int argc, char** argv) {
  const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1 << 16;
  auto comm = Communicator::from_env();
  if (!comm.ok()) {
    std::fprintf(stderr, "from_env: %s\n", comm.status().to_string().c_str());
    return 1;
  }
  Communicator& c = *comm.value();
  const int victim = c.size() - 1;
  std::vector<float> buf(count, 1.0f);
  // A few good rounds first: the failure hits an established job, not its setup.
  for (int i = 0; i < 5; ++i) {
    Status s = c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) {
      std::fprintf(stderr, "warm-up allreduce %d: %s\n", i, s.to_string().c_str());
      return 1;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (c.rank() == victim && i == 3) {
      // Mid-collective: the others are (or soon will be) waiting for this rank's data.
      Result<Request> r =
          c.allreduce_async(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      (void)r;
      usleep(1000);
      raise(SIGKILL);
    }
    Status s = c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (s.ok()) continue;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("DETECTED rank=%d code=%s seconds=%.3f message=%s\n", c.rank(),
                std::string(status_code_name(s.code())).c_str(), secs, s.message().c_str());
    std::fflush(stdout);
    const bool names_it = s.message().find("rank " + std::to_string(victim)) != std::string::npos;
    return s.code() == StatusCode::kPeerFailed && names_it ? 3 : 1;
  }
}
