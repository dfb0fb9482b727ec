#include "sgd/torch/local_trainer.h"

#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <algorithm>

#include "runtime/log.h"
#include "sgd/torch/batches.h"

namespace eagercomm::sgd {
namespace {

// Samples lie along dim 0 of image batches and dim 1 of time-major sequence batches.
int64_t sample_dim(const Model& model) { return model.takes_lengths() ? 1 : 0; }

Status check_batch(const Model& model, const torch::Tensor& input, const torch::Tensor& lengths,
                   const torch::Tensor& labels, const char* what) {
  const char* name = model.name().c_str();
  if (model.takes_lengths() != lengths.defined()) {
    return make_status(StatusCode::kInvalidArgument, "%s: model %s %s sequence lengths", what, name,
                       model.takes_lengths() ? "needs" : "takes no");
  }
  if (!input.defined() || input.dim() <= sample_dim(model)) {
    return make_status(StatusCode::kInvalidArgument, "%s: model %s: input is not a batch", what,
                       name);
  }
  if (!labels.defined() || labels.dim() != 1 || labels.scalar_type() != torch::kInt64) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s: model %s: labels must be a 1-D int64 tensor", what, name);
  }
  const int64_t n = input.size(sample_dim(model));
  if (labels.size(0) != n) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s: model %s: %lld labels for a batch of %lld samples", what, name,
                       static_cast<long long>(labels.size(0)), static_cast<long long>(n));
  }
  return Status::Ok();
}

// Puts the module in evaluation mode for its lifetime, then back in the mode it was in.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(torch::nn::Module& m) : module_(m), was_training_(m.is_training()) {
    module_.eval();
  }
  ~EvalModeGuard() { module_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace

Result<float> forward_backward(Model& model, const torch::Tensor& input,
                               const torch::Tensor& lengths, const torch::Tensor& labels) {
  EC_RETURN_IF_ERROR(check_batch(model, input, lengths, labels, "forward_backward"));
  if (labels.size(0) == 0) {
    return make_status(StatusCode::kInvalidArgument, "forward_backward: model %s: empty batch",
                       model.name().c_str());
  }
  torch::AutoGradMode grad_mode(true);
  model.zero_grad();
  EC_ASSIGN_OR_RETURN(torch::Tensor logits, model.forward(input, lengths));
  try {
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, labels);
    loss.backward();
    return loss.item<float>();
  } catch (const std::exception& e) {
    return status_from_exception(e, "forward_backward: model " + model.name());
  }
}

Result<float> forward_backward(Model& model, const torch::Tensor& input,
                               const torch::Tensor& labels) {
  return forward_backward(model, input, torch::Tensor(), labels);
}

Result<double> evaluate(Model& model, const torch::Tensor& input, const torch::Tensor& lengths,
                        const torch::Tensor& labels, size_t batch) {
  EC_RETURN_IF_ERROR(check_batch(model, input, lengths, labels, "evaluate"));
  const int64_t n = labels.size(0);
  if (n == 0 || batch == 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "evaluate: model %s: %lld samples in batches of %zu", model.name().c_str(),
                       static_cast<long long>(n), batch);
  }
  torch::NoGradGuard no_grad;
  EvalModeGuard eval_mode(model.module());
  const int64_t dim = sample_dim(model);
  const int64_t step = static_cast<int64_t>(std::min<size_t>(batch, static_cast<size_t>(n)));
  int64_t correct = 0;
  try {
    for (int64_t begin = 0; begin < n; begin += step) {
      const int64_t len = std::min(step, n - begin);
      torch::Tensor chunk_lengths =
          lengths.defined() ? lengths.narrow(0, begin, len) : torch::Tensor();
      EC_ASSIGN_OR_RETURN(torch::Tensor logits,
                          model.forward(input.narrow(dim, begin, len), chunk_lengths));
      correct += logits.argmax(1).eq(labels.narrow(0, begin, len)).sum().item<int64_t>();
    }
  } catch (const std::exception& e) {
    return status_from_exception(e, "evaluate: model " + model.name());
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

Result<double> evaluate(Model& model, const torch::Tensor& input, const torch::Tensor& labels,
                        size_t batch) {
  return evaluate(model, input, torch::Tensor(), labels, batch);
}

}  // namespace eagercomm::sgd
