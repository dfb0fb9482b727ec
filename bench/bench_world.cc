#include "bench/bench_world.h"

#include "bench/baselines.h"
#include "runtime/launch_env.h"

namespace eagercomm::bench {
namespace {

// Under a launcher when discover_launch() recognizes one (it says "environment" otherwise).
bool started_by_launcher() {
  const Result<Config>& config = Config::process();
  if (!config.ok()) return false;
  Result<LaunchInfo> info = discover_launch(process_environment(), config.value());
  return info.ok() && info.value().launcher != "environment";
}

}  // namespace

Result<std::unique_ptr<World>> World::create(const Options& o, int* argc, char*** argv) {
  std::unique_ptr<World> w(new World());
  WorldKind kind = o.world;
  if (kind == WorldKind::kAuto) {
    kind = started_by_mpi_launcher() ? WorldKind::kMpi
           : started_by_launcher()   ? WorldKind::kEnv
                                     : WorldKind::kThreads;
  }
  w->kind_ = kind;
  if (kind != WorldKind::kThreads && o.ranks_given) {
    return Status(StatusCode::kInvalidArgument,
                  "--ranks sets the number of threads; with processes the launcher sets it "
                  "(eagercomm-run -n N, mpirun -np N)");
  }
  switch (kind) {
    case WorldKind::kThreads: {
      if (o.p2p) {
        return Status(StatusCode::kInvalidArgument,
                      "--p2p measures a transport between processes: start it with a launcher "
                      "(eagercomm-run -n 2 eagercomm-bench --p2p)");
      }
      EC_ASSIGN_OR_RETURN(w->comms_, make_inproc_world(o.ranks));
      break;
    }
    case WorldKind::kEnv: {
      EC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, Communicator::from_env());
      w->comms_.push_back(std::move(c));
      break;
    }
    case WorldKind::kMpi: {
      EC_RETURN_IF_ERROR(mpi_start(argc, argv));
      w->mpi_started_ = true;
      EC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, communicator_over_mpi());
      w->comms_.push_back(std::move(c));
      break;
    }
    case WorldKind::kAuto:
      break;
  }
  w->size_ = w->comms_.front()->size();
  return w;
}

World::~World() {
  comms_.clear();
  if (mpi_started_) mpi_stop();
}

}  // namespace eagercomm::bench
