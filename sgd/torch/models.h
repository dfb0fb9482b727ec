// The networks eager-SGD trains: a small CNN and ResNet-20 for 28x28 grey images
// (Fashion-MNIST), and an LSTM classifier for variable-length sequences.
//
// A Model is a torch module plus the way to call it. The module stays an ordinary
// torch::nn::Module (parameters(), named_buffers(), train()/eval(), torch::save) so that
// FlatParameters can re-point its tensors and optimisers can walk it; the forward function hides
// that the sequence model takes lengths and the image models do not.
//
// Errors come back as Status; no exception leaves these functions (c10::Error from torch is
// converted at the boundary). A Model is not thread-safe: one rank (thread) uses it at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::sgd {

struct ModelOptions {
  int num_classes = 10;
  // Image models: input [N, in_channels, image_rows, image_cols].
  int in_channels = 1;
  int image_rows = 28;
  int image_cols = 28;
  // "lstm": features per time step (D) and hidden size (H).
  int input_dim = 8;
  int hidden = 64;
  // >= 0: seeds torch's default generator before the weights are drawn, under a process-wide
  // lock, so that ranks building the same model with the same seed start from the same weights.
  // Deterministic only while no other thread draws from the default generator at the same time
  // (ranks that are threads of one process should rather broadcast rank 0's parameters).
  // < 0: the generator is left alone.
  int64_t seed = -1;
};

// Copies share the module (a handle, like torch's ModuleHolder).
class Model {
 public:
  // Calls the module. `lengths` is undefined for image models. May throw c10::Error.
  using ForwardFn =
      std::function<torch::Tensor(const torch::Tensor& input, const torch::Tensor& lengths)>;

  Model(std::string name, std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
        bool takes_lengths);

  // Logits [N, num_classes].
  //   image models: input float32 [N, C, rows, cols]; `lengths` must be undefined.
  //   "lstm":       input float32 padded [T_max, N, D] (time-major) and lengths int64 [N] on
  //                 the CPU, every length in [1, T_max]; any order (sorted internally).
  // Runs in whatever mode (train / eval) the module is in, with autograd as the caller set it.
  Result<torch::Tensor> forward(const torch::Tensor& input,
                                const torch::Tensor& lengths = torch::Tensor()) const;

  // Zeroes every defined gradient in place. Never resets a gradient to undefined: gradients
  // that are views of a FlatParameters buffer stay views of it (torch::nn::Module::zero_grad
  // with set_to_none = true would break that).
  void zero_grad();

  torch::nn::Module& module() { return *module_; }
  const torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const { return module_; }
  const std::string& name() const { return name_; }
  // True for the sequence model, whose forward needs `lengths`.
  bool takes_lengths() const { return takes_lengths_; }
  // Number of parameter elements (without FlatParameters' alignment padding).
  size_t parameter_count() const;

 private:
  std::string name_;
  std::shared_ptr<torch::nn::Module> module_;
  ForwardFn forward_;
  bool takes_lengths_ = false;
};

// The names make_model accepts: "cnn", "resnet20", "lstm".
const std::vector<std::string>& model_names();

// Builds a freshly initialised model in training mode, float32, on the CPU:
//   "cnn"       conv 5x5 C->16, relu, maxpool 2; conv 5x5 16->32, relu, maxpool 2;
//               fc 32*(rows/4)*(cols/4) -> 128, relu, fc 128 -> num_classes. No BatchNorm.
//               215 k parameters for 28x28. Fashion-MNIST, SGD momentum 0.9, lr 0.01, batch 64,
//               one process: 86.7% test accuracy after 1 epoch, 88.1% after 2 (17 ms a step).
//   "resnet20"  He et al.'s CIFAR ResNet-20: conv 3x3 C->16 + BN; 3 stages x 3 basic blocks
//               (16, 32, 64 channels; stages 2 and 3 halve the resolution: 28 -> 14 -> 7),
//               option-A shortcuts (subsample, zero-pad the new channels: no parameters);
//               global average pooling; fc 64 -> num_classes. 269 k parameters, 1376 running
//               statistics. Same setting: 87.2% after 1 epoch (180 ms a step).
//   "lstm"      one-layer LSTM D -> H over the packed sequence (pack_padded_sequence with
//               enforce_sorted = false, so padding never enters the recurrence), fc H ->
//               num_classes on each sequence's final hidden state (that of its last real step).
// An unknown name or a non-positive size is kInvalidArgument naming the valid values.
Result<Model> make_model(const std::string& name, const ModelOptions& options = {});

}  // namespace eagercomm::sgd
