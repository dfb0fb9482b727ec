#include "sgd/torch/batches.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "sgd/sgd_log.h"

namespace eagercomm::sgd {
namespace {

Status check_images(const float* data, size_t n, int rows, int cols, const char* what) {
  if (rows < 1 || cols < 1) {
    return make_status(StatusCode::kInvalidArgument, "%s: image size %dx%d", what, rows, cols);
  }
  if (n > 0 && data == nullptr) {
    return make_status(StatusCode::kInvalidArgument, "%s: null data for %zu images", what, n);
  }
  if (n > static_cast<size_t>(std::numeric_limits<int64_t>::max()) /
              (static_cast<size_t>(rows) * static_cast<size_t>(cols))) {
    return make_status(StatusCode::kInvalidArgument, "%s: %zu images of %dx%d is too many", what, n,
                       rows, cols);
  }
  return Status::Ok();
}

template <class T>
Result<torch::Tensor> labels_impl(const T* labels, size_t n) {
  if (n > 0 && labels == nullptr) {
    return make_status(StatusCode::kInvalidArgument, "labels_to_tensor: null labels, count %zu", n);
  }
  try {
    torch::Tensor out = torch::empty({static_cast<int64_t>(n)}, torch::kInt64);
    std::copy(labels, labels + n, out.data_ptr<int64_t>());
    return out;
  } catch (const std::exception& e) {
    return status_from_exception(e, "labels_to_tensor");
  }
}

}  // namespace

Status status_from_exception(const std::exception& e, std::string_view context) {
  StatusCode code = StatusCode::kInternal;
  std::string message;
  if (const auto* te = dynamic_cast<const c10::Error*>(&e)) {
    code = StatusCode::kInvalidArgument;
    message = te->what_without_backtrace();
  } else {
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) code = StatusCode::kNoMemory;
    message = e.what();
  }
  // Torch appends the C++ source location on a line of its own; the first line is the reason.
  if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
  EC_DEBUG(kSgd, "%.*s: torch: %s", static_cast<int>(context.size()), context.data(),
           message.c_str());
  return make_status(code, "%.*s: %s", static_cast<int>(context.size()), context.data(),
                     message.c_str());
}

Result<torch::Tensor> images_to_tensor(const float* data, size_t n, int rows, int cols) {
  EC_RETURN_IF_ERROR(check_images(data, n, rows, cols, "images_to_tensor"));
  try {
    torch::Tensor out = torch::empty({static_cast<int64_t>(n), 1, rows, cols}, torch::kFloat32);
    if (n > 0) std::memcpy(out.data_ptr<float>(), data, n * rows * cols * sizeof(float));
    return out;
  } catch (const std::exception& e) {
    return status_from_exception(e, "images_to_tensor");
  }
}

Result<torch::Tensor> images_view(const float* data, size_t n, int rows, int cols) {
  EC_RETURN_IF_ERROR(check_images(data, n, rows, cols, "images_view"));
  if (n == 0) return torch::empty({0, 1, rows, cols}, torch::kFloat32);
  try {
    return torch::from_blob(const_cast<float*>(data), {static_cast<int64_t>(n), 1, rows, cols},
                            torch::kFloat32);
  } catch (const std::exception& e) {
    return status_from_exception(e, "images_view");
  }
}

Result<torch::Tensor> labels_to_tensor(const uint8_t* labels, size_t n) {
  return labels_impl(labels, n);
}
Result<torch::Tensor> labels_to_tensor(const int32_t* labels, size_t n) {
  return labels_impl(labels, n);
}
Result<torch::Tensor> labels_to_tensor(const int64_t* labels, size_t n) {
  return labels_impl(labels, n);
}

Result<PaddedSequences> pad_sequences(std::span<const SequenceRef> sequences, int dim) {
  if (dim < 1) {
    return make_status(StatusCode::kInvalidArgument, "pad_sequences: dim %d must be >= 1", dim);
  }
  if (sequences.empty()) {
    return make_status(StatusCode::kInvalidArgument, "pad_sequences: empty batch");
  }
  size_t t_max = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const SequenceRef& s = sequences[i];
    if (s.length == 0 || s.features == nullptr) {
      return make_status(StatusCode::kInvalidArgument,
                         "pad_sequences: sequence %zu has length %zu and %s features", i, s.length,
                         s.features == nullptr ? "null" : "non-null");
    }
    t_max = std::max(t_max, s.length);
  }
  const auto b = static_cast<int64_t>(sequences.size());
  try {
    PaddedSequences out;
    out.input = torch::zeros({static_cast<int64_t>(t_max), b, dim}, torch::kFloat32);
    out.lengths = torch::empty({b}, torch::kInt64);
    float* dst = out.input.data_ptr<float>();
    int64_t* len = out.lengths.data_ptr<int64_t>();
    const size_t row = static_cast<size_t>(dim);
    const size_t batch = sequences.size();
    for (size_t i = 0; i < batch; ++i) {
      const SequenceRef& s = sequences[i];
      len[i] = static_cast<int64_t>(s.length);
      // Time-major: step t of sequence i lives at [t][i][:].
      for (size_t t = 0; t < s.length; ++t) {
        std::memcpy(dst + (t * batch + i) * row, s.features + t * row, row * sizeof(float));
      }
    }
    return out;
  } catch (const std::exception& e) {
    return status_from_exception(e, "pad_sequences");
  }
}

}  // namespace eagercomm::sgd
