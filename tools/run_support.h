// eagercomm-run's helpers around the job: finding the program, the job's id, token and ports,
// the ranks' environment, signal names, pipes, and the job's leftovers in /dev/shm.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/status.h"
#include "runtime/unique_fd.h"
#include "tools/run_options.h"

namespace eagercomm::run {

// The path execve() will run: `prog` itself when it has a '/', else the first match in PATH.
// The error is the whole user-facing message.
Result<std::string> resolve_program(const std::string& prog);

// `bytes` random bytes from /dev/urandom as lower-case hex.
Result<std::string> random_hex(size_t bytes);

// A port nobody listens on right now (for torch's own store; ours is taken by our server).
Result<uint16_t> free_port();

// "signal 9 (SIGKILL)".
std::string signal_text(int sig);

// The environment of rank `r`: ours minus the variables we set, then those. Sanitizer builds
// also turn UCX's memory hooks off unless the caller chose otherwise (see the .cc).
std::vector<std::string> rank_environment(const Options& o, int r, uint16_t store_port,
                                          uint16_t torch_port, const std::string& job_id,
                                          const std::string& token);

struct Pipe {
  UniqueFd read, write;
};
std::optional<Pipe> make_pipe();  // both ends close-on-exec

// Removes /dev/shm/eagercomm-<job>-*; returns how many.
int remove_job_segments(const std::string& job_id);

}  // namespace eagercomm::run
