#include "sgd/torch/flat_parameters.h"

#include <torch/utils.h>

#include <cstring>
#include <unordered_set>
#include <utility>

#include "sgd/sgd_log.h"
#include "sgd/torch/batches.h"

namespace eagercomm::sgd {
namespace {

constexpr size_t kAlignFloats = 16;  // 64 bytes: torch's CPU allocation alignment

size_t align_up(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

Status check_tensor(const std::string& name, const torch::Tensor& t, const char* what) {
  if (!t.defined()) {
    return make_status(StatusCode::kInvalidArgument, "flat parameters: %s %s is undefined", what,
                       name.c_str());
  }
  if (t.scalar_type() != torch::kFloat32) {
    return make_status(StatusCode::kInvalidArgument,
                       "flat parameters: %s %s is %s; only float32 models can be flattened", what,
                       name.c_str(), c10::toString(t.scalar_type()));
  }
  if (!t.device().is_cpu() || t.layout() != torch::kStrided) {
    return make_status(StatusCode::kInvalidArgument,
                       "flat parameters: %s %s is not a dense CPU tensor", what, name.c_str());
  }
  return Status::Ok();
}

bool is_running_stat(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  return leaf == "running_mean" || leaf == "running_var";
}

// Whether `t` is still the view [base + offset, + numel) it was made.
bool is_view_of(const torch::Tensor& t, const float* base, const FlatParameters::Slot& slot) {
  if (!t.defined() || t.scalar_type() != torch::kFloat32 || !t.is_contiguous() ||
      static_cast<size_t>(t.numel()) != slot.numel) {
    return false;
  }
  return slot.numel == 0 || t.data_ptr() == static_cast<const void*>(base + slot.offset);
}

}  // namespace

Result<FlatParameters> FlatParameters::create(torch::nn::Module& module) {
  FlatParameters flat;
  try {
    // Shared parameters appear under several names; each TensorImpl gets one slot.
    std::unordered_set<const void*> seen;
    size_t total = 0;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      const torch::Tensor& p = item.value();
      EC_RETURN_IF_ERROR(check_tensor(item.key(), p, "parameter"));
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const auto n = static_cast<size_t>(p.numel());
      flat.param_slots_.push_back({item.key(), total, n});
      flat.params_.push_back(p);
      flat.parameter_count_ += n;
      total += align_up(n);
    }
    size_t stats_total = 0;
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      if (!is_running_stat(item.key()) || !item.value().defined()) continue;
      EC_RETURN_IF_ERROR(check_tensor(item.key(), item.value(), "statistic"));
      if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
      const auto n = static_cast<size_t>(item.value().numel());
      flat.stats_slots_.push_back({item.key(), stats_total, n});
      flat.stat_tensors_.push_back(item.value());
      stats_total += align_up(n);
    }

    // Copying the values and re-pointing are not operations to differentiate.
    torch::NoGradGuard no_grad;
    flat.count_ = total;
    flat.stats_count_ = stats_total;
    flat.param_buf_ = torch::zeros({static_cast<int64_t>(total)}, torch::kFloat32);
    flat.grad_buf_ = torch::zeros({static_cast<int64_t>(total)}, torch::kFloat32);
    flat.stats_buf_ = torch::zeros({static_cast<int64_t>(stats_total)}, torch::kFloat32);
    for (size_t i = 0; i < flat.params_.size(); ++i) {
      torch::Tensor& p = flat.params_[i];
      const Slot& s = flat.param_slots_[i];
      const auto off = static_cast<int64_t>(s.offset);
      const auto n = static_cast<int64_t>(s.numel);
      torch::Tensor data = flat.param_buf_.narrow(0, off, n).view(p.sizes());
      data.copy_(p.detach());
      // set_data swaps the storage under the parameter's own TensorImpl, so every holder of
      // the parameter (the module's members, an LSTM's flat weight list) sees the new memory.
      p.set_data(data);
      if (p.requires_grad()) {
        torch::Tensor grad = flat.grad_buf_.narrow(0, off, n).view(p.sizes());
        if (p.grad().defined()) grad.copy_(p.grad());
        // Defined before the first backward: autograd then adds into it in place instead of
        // installing a tensor of its own.
        p.mutable_grad() = grad;
      }
    }
    for (size_t i = 0; i < flat.stat_tensors_.size(); ++i) {
      torch::Tensor& t = flat.stat_tensors_[i];
      const Slot& s = flat.stats_slots_[i];
      torch::Tensor data =
          flat.stats_buf_.narrow(0, static_cast<int64_t>(s.offset), static_cast<int64_t>(s.numel))
              .view(t.sizes());
      data.copy_(t);
      // BatchNorm updates its statistics in place, so they stay views.
      t.set_data(data);
    }
    flat.params_ptr_ = total > 0 ? flat.param_buf_.data_ptr<float>() : nullptr;
    flat.grads_ptr_ = total > 0 ? flat.grad_buf_.data_ptr<float>() : nullptr;
    flat.stats_ptr_ = stats_total > 0 ? flat.stats_buf_.data_ptr<float>() : nullptr;
  } catch (const std::exception& e) {
    return status_from_exception(e, "flat parameters");
  }
  EC_DEBUG(kSgd,
           "flat parameters: %zu tensors, %zu parameters in %zu floats; %zu statistics tensors "
           "in %zu floats",
           flat.params_.size(), flat.parameter_count_, flat.count_, flat.stat_tensors_.size(),
           flat.stats_count_);
  return flat;
}

void FlatParameters::zero_grad() {
  if (count_ > 0) std::memset(grads_ptr_, 0, count_ * sizeof(float));
}

Status FlatParameters::verify() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    const Slot& s = param_slots_[i];
    if (!is_view_of(p, params_ptr_, s)) {
      return make_status(StatusCode::kInvalidArgument,
                         "flat parameters: parameter %s no longer lies in the flat buffer",
                         s.name.c_str());
    }
    if (p.requires_grad() && !is_view_of(p.grad(), grads_ptr_, s)) {
      return make_status(StatusCode::kInvalidArgument,
                         "flat parameters: the gradient of %s is %s, not its view of the flat "
                         "gradient (reset to none or replaced?)",
                         s.name.c_str(), p.grad().defined() ? "another tensor" : "undefined");
    }
  }
  for (size_t i = 0; i < stat_tensors_.size(); ++i) {
    const torch::Tensor& t = stat_tensors_[i];
    if (!is_view_of(t, stats_ptr_, stats_slots_[i])) {
      return make_status(StatusCode::kInvalidArgument,
                         "flat parameters: statistic %s no longer lies in the stats buffer",
                         stats_slots_[i].name.c_str());
    }
  }
  return Status::Ok();
}

}  // namespace eagercomm::sgd
