// Fashion-MNIST (Zalando's 28x28 grey-scale clothing images, 10 classes) as float tensors.
//
// The files come from Debian's dataset-fashion-mnist package, which installs the four
// gzip-compressed IDX files of the original distribution into kFashionMnistDefaultDir.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::sgd {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// The usual normalisation constants of Fashion-MNIST (mean and standard deviation of the
// training pixels scaled to [0, 1]).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;
inline constexpr int kFashionMnistClasses = 10;

enum class Split { kTrain, kTest };

// "train" / "test".
const char* split_name(Split split);

// Images and labels of one split, in the order of the files.
struct Dataset {
  std::vector<float> images;    // n x rows x cols, (pixel / 255 - mean) / std
  std::vector<int64_t> labels;  // n class ids in [0, 10)
  size_t n = 0;
  size_t rows = 0;
  size_t cols = 0;

  // Floats per image (rows * cols).
  size_t image_size() const { return rows * cols; }
  // The first float of image i.
  const float* image(size_t i) const { return images.data() + i * image_size(); }
};

// Loads one split from `dir` (kFashionMnistDefaultDir when empty; callers pass their
// configured override here). Each file is looked up as `<name>.gz`, then as `<name>` (a
// gunzipped copy): train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
// t10k-labels-idx1-ubyte.
//
// Errors: kUnavailable when a file is missing (the message names it and says to install
// Debian's dataset-fashion-mnist package); the errors of read_idx_file; kInvalidArgument when
// the images are not 28x28, the image and label counts differ, or a label is outside [0, 10).
Result<Dataset> load_fashion_mnist(Split split, std::string dir = "");

// The first min(n, data.n) samples of `data` (quick tests, smoke runs).
Dataset subset(const Dataset& data, size_t n);

}  // namespace eagercomm::sgd
