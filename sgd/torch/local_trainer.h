// The local half of a data-parallel step: forward, loss, backward on this rank's batch; and
// accuracy on a labelled set.
//
// Gradients land wherever the model's gradients live: with FlatParameters, in its grads()
// buffer, ready to be communicated and applied by the caller (the eager-SGD trainer). Nothing
// here communicates or updates parameters.
//
// Threads: torch's intra-op pool is process-wide and these functions do not touch it. The
// caller decides (torch::set_num_threads); with ranks as threads or processes that outnumber
// the cores, 1 thread per rank avoids oversubscription (torch's default is one per core, per
// process), and it also makes results reproducible run to run.
#pragma once

#include <torch/types.h>

#include <cstddef>

#include "runtime/status.h"
#include "sgd/torch/models.h"

namespace eagercomm::sgd {

// Zeroes the gradients (in place: flat gradients stay flat), runs the model on `input`,
// computes the mean cross-entropy against `labels` and back-propagates it. Returns the loss.
// `labels`: int64 [N] class indices in [0, num_classes); N is input.size(0) for image models.
// The model should be in training mode (BatchNorm then uses and updates batch statistics);
// autograd is enabled for the call whatever the caller's mode.
Result<float> forward_backward(Model& model, const torch::Tensor& input,
                               const torch::Tensor& labels);
// The sequence model: `input` padded [T_max, N, D], `lengths` int64 [N] (see pad_sequences).
Result<float> forward_backward(Model& model, const torch::Tensor& input,
                               const torch::Tensor& lengths, const torch::Tensor& labels);

// Fraction in [0, 1] of the samples whose arg-max logit is their label, computed `batch`
// samples at a time without autograd and in evaluation mode (BatchNorm uses its running
// statistics); the module's previous mode is restored afterwards, also on error. Gradients are
// not touched. An empty set or batch == 0 is kInvalidArgument.
Result<double> evaluate(Model& model, const torch::Tensor& input, const torch::Tensor& labels,
                        size_t batch);
Result<double> evaluate(Model& model, const torch::Tensor& input, const torch::Tensor& lengths,
                        const torch::Tensor& labels, size_t batch);

}  // namespace eagercomm::sgd
