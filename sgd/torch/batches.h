// Conversions between eagercomm's side and torch's: host arrays to batch tensors, torch's
// exceptions to Status.
//
// Independent of the data sets (sgd/data/): callers hand in plain pointers, so any loader fits.
// Every tensor made here is float32 / int64 on the CPU. No exception leaves these functions.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string_view>

#include "runtime/status.h"

namespace eagercomm::sgd {

// The Status for an exception caught at the boundary of this library: kInvalidArgument for
// c10::Error (torch throws it for bad shapes, types and values), kNoMemory for std::bad_alloc,
// kInternal otherwise. The message is "<context>: <torch's message without its backtrace>".
Status status_from_exception(const std::exception& e, std::string_view context);

// [n, 1, rows, cols] float32 holding a copy of `data` (n * rows * cols floats, image-major,
// row-major within an image). The tensor owns its memory: `data` may go right after.
Result<torch::Tensor> images_to_tensor(const float* data, size_t n, int rows, int cols);

// The same shape without a copy: the tensor looks at `data`, which must outlive it (and every
// tensor derived from it without a copy). For a batch used within one step while the data set
// stays loaded. The models never write their input, and no gradient is computed for it, so the
// const_cast this needs (torch has no read-only tensors) is safe in forward_backward/evaluate.
Result<torch::Tensor> images_view(const float* data, size_t n, int rows, int cols);

// [n] int64 class labels, copied. Range checks happen in forward_backward / evaluate.
Result<torch::Tensor> labels_to_tensor(const uint8_t* labels, size_t n);
Result<torch::Tensor> labels_to_tensor(const int32_t* labels, size_t n);
Result<torch::Tensor> labels_to_tensor(const int64_t* labels, size_t n);

// One sequence of the variable-length task: `length` steps of `dim` floats each, step-major
// (features[t * dim + d]).
struct SequenceRef {
  size_t length = 0;
  const float* features = nullptr;
};

// A batch of sequences as the "lstm" model takes it.
struct PaddedSequences {
  torch::Tensor input;    // float32 [T_max, B, dim], time-major, zeros after each sequence's end
  torch::Tensor lengths;  // int64 [B] (CPU), in the order of the sequences given
};

// Copies `sequences` into one padded batch; T_max is the longest length. Every sequence needs
// length >= 1 (packing rejects empty ones) and non-null features; the batch must not be empty.
Result<PaddedSequences> pad_sequences(std::span<const SequenceRef> sequences, int dim);

}  // namespace eagercomm::sgd
