// IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/).
//
// Layout: a big-endian magic {0, 0, type, dims}, `dims` big-endian uint32 sizes, then the
// elements in row-major order. Only unsigned bytes (type 0x08) are supported: that is what the
// image and label files hold (magic 0x00000803 for N x rows x cols images, 0x00000801 for N
// labels). Files may be gzip-compressed, as distributed; the reader tells the two apart by the
// gzip magic 1f 8b, so a gunzipped copy reads the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::sgd {

// The IDX element type byte of unsigned bytes, the only one supported.
inline constexpr uint8_t kIdxTypeU8 = 0x08;
// Largest element count accepted: far above any IDX data set in use (Fashion-MNIST's training
// images are 47 million), low enough that a corrupt header cannot make us allocate gigabytes.
inline constexpr uint64_t kIdxMaxElements = uint64_t{1} << 28;
// Most dimensions accepted in a header.
inline constexpr int kIdxMaxDims = 8;

// A tensor of unsigned bytes read from (or to be written to) an IDX file.
struct IdxArray {
  std::vector<uint32_t> dims;  // outermost first (N, rows, cols)
  std::vector<uint8_t> data;   // row-major, product(dims) bytes

  // Product of the dims (1 for no dims).
  uint64_t element_count() const;
};

// Reads the IDX file at `path` (plain or gzip-compressed).
//
// `expected_dims` > 0 requires exactly that many dimensions (3 for images, 1 for labels);
// 0 accepts 1..kIdxMaxDims. Errors name the file and what is wrong with it:
//   kIoError          the file cannot be opened or read (message carries errno's text)
//   kInvalidArgument  not an IDX file (magic), unsupported type byte, wrong dimension count,
//                     more than kIdxMaxElements elements, truncated data, bytes after the data,
//                     corrupt or truncated gzip stream
Result<IdxArray> read_idx_file(const std::string& path, int expected_dims = 0);

// Writes `array` as an IDX file of unsigned bytes, gzip-compressed when `gzip` (test fixtures,
// small derived data sets). kInvalidArgument when data.size() does not match the dims or the
// dims are out of range; kIoError when the file cannot be written.
Status write_idx_file(const std::string& path, const IdxArray& array, bool gzip);

// Writes `bytes` as they are, gzip-compressed when `gzip`: what write_idx_file does after
// encoding, offered for fixtures of damaged files (tests need no zlib of their own).
// kIoError when the file cannot be written.
Status write_file_bytes(const std::string& path, std::span<const uint8_t> bytes, bool gzip);

}  // namespace eagercomm::sgd
