// The ranks eagercomm-bench measures: threads of this process (--ranks) or this process as one
// rank of a job started by a launcher (eagercomm-run, torchrun, srun: Communicator::from_env) or
// by mpirun (bootstrapped through MPI, which also hosts the --compare baselines).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "bench/bench_options.h"
#include "collectives/communicator.h"

namespace eagercomm::bench {

class World {
 public:
  // Resolves --world auto, initializes MPI when needed (argc/argv go to MPI_Init) and joins.
  static Result<std::unique_ptr<World>> create(const Options& o, int* argc, char*** argv);
  ~World();  // destroys the communicators, then finalizes MPI
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  WorldKind kind() const { return kind_; }
  int size() const { return size_; }
  // True for the process that prints the report: always with threads, rank 0 otherwise.
  bool reports() const { return comms_.empty() || comms_.front()->rank() == 0; }
  // The communicators of this process: every rank with threads, one otherwise.
  std::vector<std::unique_ptr<Communicator>>& comms() { return comms_; }

  // Runs fn(comm) for every communicator of this process (one thread each when several) and
  // returns rank 0's value; an error of any rank is printed with its rank and returned.
  template <class T, class Fn>
  std::optional<T> run(Fn fn) {
    std::vector<std::optional<Result<T>>> results(comms_.size());
    if (comms_.size() == 1) {
      results[0].emplace(fn(*comms_[0]));
    } else {
      std::vector<std::thread> threads;
      for (size_t r = 0; r < comms_.size(); ++r) {
        threads.emplace_back([&, r] { results[r].emplace(fn(*comms_[r])); });
      }
      for (auto& t : threads) t.join();
    }
    std::optional<T> first;
    for (size_t r = 0; r < comms_.size(); ++r) {
      if (!results[r]->ok()) {
        std::fprintf(stderr, "eagercomm-bench: rank %d: %s\n", comms_[r]->rank(),
                     results[r]->status().to_string().c_str());
        return std::nullopt;
      }
      if (r == 0) first.emplace(std::move(*results[r]).value());
    }
    return first;
  }

 private:
  World() = default;
  WorldKind kind_ = WorldKind::kThreads;
  int size_ = 0;
  bool mpi_started_ = false;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace eagercomm::bench
