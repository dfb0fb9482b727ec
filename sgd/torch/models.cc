#include "sgd/torch/models.h"

#include <c10/util/Exception.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/utils/rnn.h>
#include <torch/utils.h>

#include <mutex>
#include <utility>

#include "sgd/sgd_log.h"
#include "sgd/torch/batches.h"

namespace eagercomm::sgd {
namespace {

namespace F = torch::nn::functional;

// --- cnn ---------------------------------------------------------------------------------------

struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(const ModelOptions& o)
      : rows(o.image_rows), cols(o.image_cols), channels(o.in_channels) {
    conv1 = register_module(
        "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(o.in_channels, 16, 5).padding(2)));
    conv2 =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * (rows / 4) * (cols / 4), 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, o.num_classes));
  }

  torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 4 && x.size(1) == channels && x.size(2) == rows && x.size(3) == cols,
                "cnn: input must be [N, ", channels, ", ", rows, ", ", cols, "], got ", x.sizes());
    x = F::max_pool2d(torch::relu(conv1->forward(x)), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(torch::relu(conv2->forward(x)), F::MaxPool2dFuncOptions(2));
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }

  int rows, cols, channels;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// --- resnet20 ----------------------------------------------------------------------------------

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// The basic block of He et al. with the option-A shortcut the paper uses on CIFAR: when the
// block changes shape, the input is subsampled and zero-padded with the new channels, which
// costs no parameters (a 1x1 projection would add 3% of ResNet-20's weights for no gain there).
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) : in(in), out(out), stride(stride) {
    conv1 = register_module("conv1", conv3x3(in, out, stride));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2 = register_module("conv2", conv3x3(out, out, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    torch::Tensor shortcut = x;
    if (stride != 1 || in != out) {
      shortcut = x.slice(2, c10::nullopt, c10::nullopt, stride)
                     .slice(3, c10::nullopt, c10::nullopt, stride);
      const int64_t below = (out - in) / 2;
      shortcut = torch::constant_pad_nd(shortcut, {0, 0, 0, 0, below, out - in - below});
    }
    return torch::relu(y + shortcut);
  }

  int64_t in, out, stride;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNet20Impl : torch::nn::Module {
  explicit ResNet20Impl(const ModelOptions& o) : channels(o.in_channels) {
    conv = register_module("conv", conv3x3(o.in_channels, 16, 1));
    bn = register_module("bn", torch::nn::BatchNorm2d(16));
    int64_t in = 16;
    const int64_t widths[3] = {16, 32, 64};
    for (int s = 0; s < 3; ++s) {
      torch::nn::Sequential stage;
      for (int b = 0; b < 3; ++b) {
        stage->push_back(BasicBlock(in, widths[s], s > 0 && b == 0 ? 2 : 1));
        in = widths[s];
      }
      stages.push_back(register_module("stage" + std::to_string(s + 1), stage));
    }
    fc = register_module("fc", torch::nn::Linear(64, o.num_classes));
    // He initialisation for the convolutions, as the reference implementation; torch's default
    // (uniform with a = sqrt(5)) trains a 20-layer net noticeably slower at the start.
    for (auto& p : named_parameters()) {
      if (p.value().dim() == 4) {
        torch::nn::init::kaiming_normal_(p.value(), 0, torch::kFanOut, torch::kReLU);
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 4 && x.size(1) == channels, "resnet20: input must be [N, ", channels,
                ", rows, cols], got ", x.sizes());
    x = torch::relu(bn->forward(conv->forward(x)));
    for (auto& stage : stages) x = stage->forward(x);
    x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
    return fc->forward(x);
  }

  int64_t channels;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  std::vector<torch::nn::Sequential> stages;
  torch::nn::Linear fc{nullptr};
};

// --- lstm --------------------------------------------------------------------------------------

struct LstmClassifierImpl : torch::nn::Module {
  explicit LstmClassifierImpl(const ModelOptions& o) : dim(o.input_dim) {
    lstm = register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(o.input_dim, o.hidden)));
    fc = register_module("fc", torch::nn::Linear(o.hidden, o.num_classes));
  }

  // Packing (LibTorch 1.13 has pack_padded_sequence with enforce_sorted = false) runs the
  // recurrence over each sequence's real steps only, so the final hidden state is that of the
  // last real step and padding costs no compute. The LSTM returns h_n in the caller's order
  // (it un-permutes with the packed sequence's unsorted_indices).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& lengths) {
    TORCH_CHECK(x.dim() == 3 && x.size(2) == dim, "lstm: input must be padded [T_max, N, ", dim,
                "], got ", x.sizes());
    TORCH_CHECK(lengths.defined() && lengths.dim() == 1 && lengths.size(0) == x.size(1),
                "lstm: lengths must be a 1-D tensor of ", x.size(1), " sequence lengths");
    TORCH_CHECK(lengths.device().is_cpu(), "lstm: lengths must be on the CPU");
    if (lengths.numel() > 0) {
      const int64_t lo = lengths.min().item<int64_t>();
      const int64_t hi = lengths.max().item<int64_t>();
      TORCH_CHECK(lo >= 1 && hi <= x.size(0), "lstm: sequence lengths must lie in [1, ", x.size(0),
                  "] (T_max), got [", lo, ", ", hi, "]");
    }
    auto packed = torch::nn::utils::rnn::pack_padded_sequence(x, lengths, /*batch_first=*/false,
                                                              /*enforce_sorted=*/false);
    auto result = lstm->forward_with_packed_input(packed);
    const torch::Tensor& h_n = std::get<0>(std::get<1>(result));  // [layers, N, H]
    return fc->forward(h_n.select(0, h_n.size(0) - 1));
  }

  int64_t dim;
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear fc{nullptr};
};

Status check_options(const std::string& name, const ModelOptions& o) {
  if (o.num_classes < 1) {
    return make_status(StatusCode::kInvalidArgument, "model %s: num_classes %d must be >= 1",
                       name.c_str(), o.num_classes);
  }
  if (name == "lstm") {
    if (o.input_dim < 1 || o.hidden < 1) {
      return make_status(StatusCode::kInvalidArgument,
                         "model lstm: input_dim %d and hidden %d must be >= 1", o.input_dim,
                         o.hidden);
    }
    return Status::Ok();
  }
  const int min_side = name == "cnn" ? 4 : 1;  // the cnn's two poolings need 4x4 at least
  if (o.in_channels < 1 || o.image_rows < min_side || o.image_cols < min_side) {
    return make_status(StatusCode::kInvalidArgument,
                       "model %s: in_channels %d must be >= 1 and image %dx%d at least %dx%d",
                       name.c_str(), o.in_channels, o.image_rows, o.image_cols, min_side, min_side);
  }
  return Status::Ok();
}

// A model of images: its forward takes no sequence lengths.
template <typename Impl>
Model image_model(const std::string& name, const ModelOptions& o) {
  auto m = std::make_shared<Impl>(o);
  return Model(
      name, m,
      [m, name](const torch::Tensor& x, const torch::Tensor& lengths) {
        TORCH_CHECK(!lengths.defined(), name, ": takes no sequence lengths");
        return m->forward(x);
      },
      false);
}

Result<Model> build(const std::string& name, const ModelOptions& o) {
  if (name == "cnn") return image_model<CnnImpl>(name, o);
  if (name == "resnet20") return image_model<ResNet20Impl>(name, o);
  auto m = std::make_shared<LstmClassifierImpl>(o);
  return Model(
      name, m,
      [m](const torch::Tensor& x, const torch::Tensor& lengths) { return m->forward(x, lengths); },
      true);
}

std::string joined_names() {
  std::string s;
  for (const auto& n : model_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Model::Model(std::string name, std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
             bool takes_lengths)
    : name_(std::move(name)),
      module_(std::move(module)),
      forward_(std::move(forward)),
      takes_lengths_(takes_lengths) {}

Result<torch::Tensor> Model::forward(const torch::Tensor& input,
                                     const torch::Tensor& lengths) const {
  if (!input.defined()) {
    return make_status(StatusCode::kInvalidArgument, "model %s: undefined input tensor",
                       name_.c_str());
  }
  if (input.scalar_type() != torch::kFloat32) {
    return make_status(StatusCode::kInvalidArgument, "model %s: input must be float32, got %s",
                       name_.c_str(), c10::toString(input.scalar_type()));
  }
  try {
    return forward_(input, lengths);
  } catch (const std::exception& e) {
    return status_from_exception(e, "model " + name_ + ": forward");
  }
}

void Model::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& p : module_->parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

size_t Model::parameter_count() const {
  size_t n = 0;
  for (const auto& p : module_->parameters()) n += static_cast<size_t>(p.numel());
  return n;
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"cnn", "resnet20", "lstm"};
  return names;
}

Result<Model> make_model(const std::string& name, const ModelOptions& options) {
  bool known = false;
  for (const auto& n : model_names()) known = known || n == name;
  if (!known) {
    return make_status(StatusCode::kInvalidArgument, "unknown model '%s' (valid: %s)", name.c_str(),
                       joined_names().c_str());
  }
  EC_RETURN_IF_ERROR(check_options(name, options));
  // Seeding and drawing must not interleave with another make_model's.
  static std::mutex seed_mutex;
  std::unique_lock<std::mutex> lock(seed_mutex, std::defer_lock);
  try {
    if (options.seed >= 0) {
      lock.lock();
      torch::manual_seed(static_cast<uint64_t>(options.seed));
    }
    EC_ASSIGN_OR_RETURN(Model model, build(name, options));
    model.module().train();
    EC_DEBUG(kSgd, "model %s: %zu parameters in %zu tensors", name.c_str(), model.parameter_count(),
             model.module().parameters().size());
    return model;
  } catch (const std::exception& e) {
    return status_from_exception(e, "model " + name + ": construction");
  }
}

}  // namespace eagercomm::sgd
