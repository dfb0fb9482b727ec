// eagercomm-train: data-parallel training with eager SGD (see sgd/EXPERIMENTS.md).
//
//   eagercomm-run -n 4 eagercomm-train --model cnn --mode sync,solo,majority,adaptive --epochs 2
//                  --imbalance 1:20 --seeds 1,2,3 --evals-per-epoch 2 --curve curve.csv
#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "collectives/communicator.h"
#include "runtime/log.h"
#include "sgd/train/train_options.h"
#include "sgd/train/trainer.h"

namespace {

using namespace eagercomm;

bool write_file(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    return true;
  }
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

int run(int argc, char** argv) {
  Result<sgd::TrainOptions> parsed = sgd::parse_train_options(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().message().c_str());
    return 2;
  }
  const sgd::TrainOptions& o = parsed.value();
  if (o.help) {
    std::fputs(sgd::train_usage().c_str(), stdout);
    return 0;
  }
  // Ranks usually outnumber cores: one torch thread each unless told otherwise.
  torch::set_num_threads(o.threads);
  Result<std::unique_ptr<Communicator>> comm = Communicator::from_env();
  if (!comm.ok()) {
    std::fprintf(stderr, "eagercomm-train: joining the job: %s\n",
                 comm.status().to_string().c_str());
    return 1;
  }
  Communicator& c = *comm.value();
  Result<std::vector<sgd::ModeReport>> reports = sgd::train(c, o);
  if (!reports.ok()) {
    std::fprintf(stderr, "eagercomm-train: rank %d: %s\n", c.rank(),
                 reports.status().to_string().c_str());
    return 1;
  }
  if (c.rank() == 0) {
    std::fputs(sgd::format_reports(reports.value(), o, c.size()).c_str(), stdout);
    if (!o.json.empty() &&
        !write_file(o.json, sgd::reports_to_json(reports.value(), o, c.size()))) {
      std::fprintf(stderr, "eagercomm-train: cannot write %s\n", o.json.c_str());
      return 1;
    }
    if (!o.curve.empty() && !write_file(o.curve, sgd::curves_to_csv(reports.value()))) {
      std::fprintf(stderr, "eagercomm-train: cannot write %s\n", o.curve.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
