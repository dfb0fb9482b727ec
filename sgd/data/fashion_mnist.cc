#include "sgd/data/fashion_mnist.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "sgd/data/idx_file.h"
#include "sgd/sgd_log.h"

namespace eagercomm::sgd {
namespace {

constexpr size_t kSide = 28;
constexpr const char* kInstallHint =
    "install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist)";

// The path of `name` in `dir`: the compressed file as distributed, or a gunzipped copy.
Result<std::string> find_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& candidate : {name + ".gz", name}) {
    const fs::path path = fs::path(dir) / candidate;
    if (fs::is_regular_file(path, ec)) return path.string();
  }
  const std::string path = (fs::path(dir) / name).string();
  if (!fs::is_directory(dir, ec)) {
    return make_status(StatusCode::kUnavailable,
                       "fashion-mnist: directory %s does not exist, so %s.gz is missing; %s, or "
                       "pass the directory that holds the four IDX files",
                       dir.c_str(), path.c_str(), kInstallHint);
  }
  return make_status(StatusCode::kUnavailable,
                     "fashion-mnist: file %s.gz (or %s) is missing; %s, or pass the directory "
                     "that holds the four IDX files",
                     path.c_str(), path.c_str(), kInstallHint);
}

}  // namespace

const char* split_name(Split split) { return split == Split::kTrain ? "train" : "test"; }

Result<Dataset> load_fashion_mnist(Split split, std::string dir) {
  if (dir.empty()) dir = kFashionMnistDefaultDir;
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  // Both paths first, so that a missing package is reported before any file is read.
  EC_ASSIGN_OR_RETURN(std::string images_path, find_file(dir, prefix + "-images-idx3-ubyte"));
  EC_ASSIGN_OR_RETURN(std::string labels_path, find_file(dir, prefix + "-labels-idx1-ubyte"));
  EC_ASSIGN_OR_RETURN(IdxArray images, read_idx_file(images_path, 3));
  EC_ASSIGN_OR_RETURN(IdxArray labels, read_idx_file(labels_path, 1));

  // The models built on this data take 28x28 inputs; any other size is a different data set.
  if (images.dims[1] != kSide || images.dims[2] != kSide) {
    return make_status(StatusCode::kInvalidArgument,
                       "fashion-mnist: images in %s are %ux%u, expected 28x28", images_path.c_str(),
                       images.dims[1], images.dims[2]);
  }
  if (images.dims[0] != labels.dims[0]) {
    return make_status(StatusCode::kInvalidArgument,
                       "fashion-mnist: %s holds %u images but %s holds %u labels",
                       images_path.c_str(), images.dims[0], labels_path.c_str(), labels.dims[0]);
  }

  Dataset data;
  data.n = images.dims[0];
  data.rows = kSide;
  data.cols = kSide;
  data.labels.resize(data.n);
  for (size_t i = 0; i < data.n; ++i) {
    if (labels.data[i] >= kFashionMnistClasses) {
      return make_status(StatusCode::kInvalidArgument,
                         "fashion-mnist: label %zu in %s is %u, outside [0, %d)", i,
                         labels_path.c_str(), labels.data[i], kFashionMnistClasses);
    }
    data.labels[i] = labels.data[i];
  }
  // One multiply-add per pixel: (p / 255 - mean) / std = p * scale + shift.
  const float scale = 1.0f / (255.0f * kFashionMnistStd);
  const float shift = -kFashionMnistMean / kFashionMnistStd;
  data.images.resize(images.data.size());
  std::transform(images.data.begin(), images.data.end(), data.images.begin(),
                 [&](uint8_t p) { return static_cast<float>(p) * scale + shift; });
  EC_INFO(kSgd, "fashion-mnist %s: %zu images of %zux%zu from %s", split_name(split), data.n,
          data.rows, data.cols, dir.c_str());
  return data;
}

Dataset subset(const Dataset& data, size_t n) {
  n = std::min(n, data.n);
  Dataset out;
  out.n = n;
  out.rows = data.rows;
  out.cols = data.cols;
  out.images.assign(data.images.begin(),
                    data.images.begin() + static_cast<std::ptrdiff_t>(n * data.image_size()));
  out.labels.assign(data.labels.begin(), data.labels.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

}  // namespace eagercomm::sgd
