// One contiguous buffer for a module's parameters, one for their gradients, one for its
// BatchNorm running statistics.
//
// Eager-SGD communicates and updates the model as flat float arrays. Instead of copying
// between the module's tensors and such arrays at every step, FlatParameters makes the module's
// tensors views into the arrays: every parameter's data is a view of params(), its gradient a
// view of grads() (so backward accumulates straight into grads()), and every BatchNorm
// running_mean / running_var a view of stats(). Writing params() changes the model; reading
// grads() after backward reads the gradient; no per-step copy exists.
//
// Keeping the binding: autograd accumulates in place into a gradient that is defined (backward
// without create_graph), which is why every gradient is created up front as a view. Anything
// that resets a gradient to undefined (torch::nn::Module::zero_grad(true), an optimiser's
// zero_grad with set_to_none) or assigns a new tensor breaks the binding; verify() detects it.
// Use zero_grad() here (or Model::zero_grad()).
//
// Layout: each tensor starts at a multiple of 16 floats (64 bytes, like torch's own
// allocations, so kernels see the alignment they saw before and results stay bit-identical);
// the gaps are zeros that stay zero (no gradient ever lands there), so count() is a little
// larger than the number of parameters. Each buffer's data is 64-byte aligned.
//
// Not thread-safe. Do not write params() between a forward and its backward: autograd cannot see
// such writes and would compute the gradient from stale saved tensors.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::sgd {

class FlatParameters {
 public:
  // Where one tensor lives in its buffer.
  struct Slot {
    std::string name;  // as named_parameters() / named_buffers() name it ("stage1.0.bn1.weight")
    size_t offset;     // in floats from the start of the buffer
    size_t numel;
  };

  // Moves every parameter of `module` (recursively, shared ones once) into the flat parameter
  // buffer and gives each parameter that requires a gradient a gradient view (carrying over an
  // existing gradient's values, else zero); moves every floating running_mean / running_var
  // buffer into the stats buffer (num_batches_tracked and other buffers stay where they are).
  // Values are unchanged, so the module computes exactly what it computed before.
  // kInvalidArgument when a parameter or statistic is not a dense float32 CPU tensor.
  // Flattening the same module again re-points it to the new buffers (the old object is stale).
  static Result<FlatParameters> create(torch::nn::Module& module);

  FlatParameters(FlatParameters&&) = default;
  FlatParameters& operator=(FlatParameters&&) = default;
  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  float* params() { return params_ptr_; }
  const float* params() const { return params_ptr_; }
  float* grads() { return grads_ptr_; }
  const float* grads() const { return grads_ptr_; }
  // Floats in params() and in grads(), alignment gaps included.
  size_t count() const { return count_; }
  // Parameter elements proper (count() without the gaps).
  size_t parameter_count() const { return parameter_count_; }

  // BatchNorm running statistics (empty for models without BatchNorm): a trainer averages them
  // at synchronous rounds. Alignment as for the parameters.
  float* stats() { return stats_ptr_; }
  const float* stats() const { return stats_ptr_; }
  size_t stats_count() const { return stats_count_; }

  // Zeroes grads() (gaps included) in one pass; gradients stay views of it.
  void zero_grad();

  // kInvalidArgument naming the first parameter, gradient or statistic that is no longer the
  // view it was made (something reset or replaced it), Ok otherwise. O(number of tensors).
  Status verify() const;

  // The buffers as 1-D float32 tensors of count() / stats_count() elements.
  const torch::Tensor& param_buffer() const { return param_buf_; }
  const torch::Tensor& grad_buffer() const { return grad_buf_; }
  const torch::Tensor& stats_buffer() const { return stats_buf_; }
  const std::vector<Slot>& param_slots() const { return param_slots_; }
  const std::vector<Slot>& stats_slots() const { return stats_slots_; }

 private:
  FlatParameters() = default;

  torch::Tensor param_buf_, grad_buf_, stats_buf_;
  float* params_ptr_ = nullptr;
  float* grads_ptr_ = nullptr;
  float* stats_ptr_ = nullptr;
  size_t count_ = 0;
  size_t parameter_count_ = 0;
  size_t stats_count_ = 0;
  std::vector<Slot> param_slots_, stats_slots_;
  // The module's own tensors (same TensorImpls), for verify().
  std::vector<torch::Tensor> params_, stat_tensors_;
};

}  // namespace eagercomm::sgd
