#include "sgd/data/idx_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sgd/sgd_log.h"

namespace eagercomm::sgd {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// The bytes of a plain or gzip-compressed file, decompressed, in order.
//
// inflate() rather than gzread(): gzread silently ignores bytes after the last gzip member and
// treats a file with a damaged gzip header as plain data; a training run fed a half-downloaded
// data set should fail at load time, not learn from garbage.
class ByteSource {
 public:
  ByteSource(std::string path, FilePtr file) : path_(std::move(path)), file_(std::move(file)) {}
  ~ByteSource() {
    if (inflate_ready_) inflateEnd(&zs_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  static Result<std::unique_ptr<ByteSource>> open(const std::string& path) {
    FilePtr file(std::fopen(path.c_str(), "rb"));
    if (!file) {
      return make_status(StatusCode::kIoError, "cannot open IDX file %s: %s", path.c_str(),
                         std::strerror(errno));
    }
    auto src = std::make_unique<ByteSource>(path, std::move(file));
    EC_RETURN_IF_ERROR(src->start());
    return src;
  }

  bool gzip() const { return gzip_; }

  // Fills dst with n bytes, or fewer at the end of the data; returns how many.
  Result<size_t> read(uint8_t* dst, size_t n) {
    return gzip_ ? read_gzip(dst, n) : read_plain(dst, n);
  }

 private:
  static constexpr size_t kChunk = 256 * 1024;

  Status start() {
    in_.resize(kChunk);
    EC_RETURN_IF_ERROR(refill());
    gzip_ = in_len_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      // 16 + MAX_WBITS: gzip wrapper only, so a zlib-wrapped or raw stream is an error.
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) {
        return make_status(StatusCode::kNoMemory, "IDX file %s: cannot start zlib's inflate",
                           path_.c_str());
      }
      inflate_ready_ = true;
    }
    return Status::Ok();
  }

  // Replaces the (consumed) input buffer with the next chunk of the file.
  Status refill() {
    in_pos_ = in_len_ = 0;
    if (file_eof_) return Status::Ok();
    in_len_ = std::fread(in_.data(), 1, in_.size(), file_.get());
    if (in_len_ < in_.size()) {
      if (std::ferror(file_.get())) {
        return make_status(StatusCode::kIoError, "reading IDX file %s: %s", path_.c_str(),
                           std::strerror(errno));
      }
      file_eof_ = true;
    }
    file_bytes_ += in_len_;
    return Status::Ok();
  }

  Result<size_t> read_plain(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (in_pos_ == in_len_) {
        EC_RETURN_IF_ERROR(refill());
        if (in_len_ == 0) break;
      }
      const size_t take = std::min(n - done, in_len_ - in_pos_);
      std::memcpy(dst + done, in_.data() + in_pos_, take);
      in_pos_ += take;
      done += take;
    }
    return done;
  }

  Result<size_t> read_gzip(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (in_pos_ == in_len_) {
        EC_RETURN_IF_ERROR(refill());
        if (in_len_ == 0) {
          if (member_done_) break;  // clean end of the last member
          return make_status(StatusCode::kInvalidArgument,
                             "gzip-compressed IDX file %s is truncated: the gzip stream ends "
                             "without its trailer after %" PRIu64 " compressed bytes",
                             path_.c_str(), file_bytes_);
        }
      }
      if (member_done_) {
        // gzip allows concatenated members; anything else after a member is garbage, which
        // inflate's header check below reports.
        inflateReset(&zs_);
        member_done_ = false;
        ++members_;
      }
      // Chunks are bounded so the uInt fields of z_stream never overflow.
      const size_t out_chunk = std::min<size_t>(n - done, kChunk);
      zs_.next_in = in_.data() + in_pos_;
      zs_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      zs_.next_out = dst + done;
      zs_.avail_out = static_cast<uInt>(out_chunk);
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      in_pos_ = in_len_ - zs_.avail_in;
      done += out_chunk - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc == Z_DATA_ERROR && members_ > 0 && zs_.total_out == 0) {
        return make_status(StatusCode::kInvalidArgument,
                           "gzip-compressed IDX file %s has trailing garbage after the end of "
                           "its gzip stream",
                           path_.c_str());
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return make_status(StatusCode::kInvalidArgument,
                           "gzip-compressed IDX file %s is corrupt: %s (zlib error %d)",
                           path_.c_str(), zs_.msg ? zs_.msg : "no message", rc);
      }
    }
    return done;
  }

  std::string path_;
  FilePtr file_;
  std::vector<uint8_t> in_;  // file bytes, compressed or not
  size_t in_pos_ = 0;
  size_t in_len_ = 0;
  uint64_t file_bytes_ = 0;
  bool file_eof_ = false;
  bool gzip_ = false;
  z_stream zs_{};
  bool inflate_ready_ = false;
  bool member_done_ = false;
  int members_ = 0;  // gzip members finished before the current one
};

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "not an IDX type";
  }
}

std::string dims_string(const std::vector<uint32_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += " x ";
    s += std::to_string(dims[i]);
  }
  return s;
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Product of the dims, or kIdxMaxElements + 1 as soon as it exceeds the limit (no overflow:
// the running product stays <= 2^28 before each multiplication by a 32-bit size).
uint64_t bounded_element_count(const std::vector<uint32_t>& dims) {
  uint64_t count = 1;
  for (uint32_t d : dims) {
    count *= d;
    if (count > kIdxMaxElements) return kIdxMaxElements + 1;
  }
  return count;
}

}  // namespace

uint64_t IdxArray::element_count() const {
  uint64_t count = 1;
  for (uint32_t d : dims) count *= d;
  return count;
}

Result<IdxArray> read_idx_file(const std::string& path, int expected_dims) {
  EC_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, ByteSource::open(path));
  const char* what = src->gzip() ? "gzip-compressed IDX file" : "IDX file";
  const char* file = path.c_str();

  uint8_t magic[4];
  EC_ASSIGN_OR_RETURN(size_t got, src->read(magic, sizeof magic));
  if (got == 0) return make_status(StatusCode::kInvalidArgument, "%s %s is empty", what, file);
  if (got < sizeof magic) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s is truncated: it ends inside the 4-byte magic", what, file);
  }
  const uint32_t magic_value = load_be32(magic);
  if (magic[0] != 0 || magic[1] != 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s is not an IDX file: bad magic 0x%08" PRIx32
                       " (IDX magics start with two zero bytes, e.g. 0x00000803)",
                       file, magic_value);
  }
  if (magic[2] != kIdxTypeU8) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s has element type byte 0x%02x (%s) in magic 0x%08" PRIx32
                       "; only 0x08 (unsigned byte) is supported",
                       what, file, magic[2], idx_type_name(magic[2]), magic_value);
  }
  const int ndims = magic[3];
  if (expected_dims > 0 && ndims != expected_dims) {
    return make_status(
        StatusCode::kInvalidArgument,
        "%s %s has %d dimensions (magic 0x%08" PRIx32 "), expected %d (magic 0x%08x)", what, file,
        ndims, magic_value, expected_dims, 0x0800u | static_cast<unsigned>(expected_dims));
  }
  if (ndims < 1 || ndims > kIdxMaxDims) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s has %d dimensions (magic 0x%08" PRIx32 "); 1 to %d are supported",
                       what, file, ndims, magic_value, kIdxMaxDims);
  }

  IdxArray array;
  std::vector<uint8_t> header(4 * static_cast<size_t>(ndims));
  EC_ASSIGN_OR_RETURN(got, src->read(header.data(), header.size()));
  if (got < header.size()) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s is truncated: the header ends after %zu of its %d dimension sizes",
                       what, file, got / 4, ndims);
  }
  for (int i = 0; i < ndims; ++i) array.dims.push_back(load_be32(&header[4 * i]));
  const uint64_t count = bounded_element_count(array.dims);
  if (count > kIdxMaxElements) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s has absurd dimensions %s: more than 2^28 elements (corrupt header?)",
                       what, file, dims_string(array.dims).c_str());
  }

  array.data.resize(count);
  EC_ASSIGN_OR_RETURN(got, src->read(array.data.data(), array.data.size()));
  if (got < count) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s is truncated: %zu of the %" PRIu64
                       " data bytes its header announces (dims %s)",
                       what, file, got, count, dims_string(array.dims).c_str());
  }
  // Bytes past the announced data mean the header and the data disagree: refuse rather than
  // guess which one is right.
  uint64_t extra = 0;
  uint8_t scratch[4096];
  do {
    EC_ASSIGN_OR_RETURN(got, src->read(scratch, sizeof scratch));
    extra += got;
  } while (got == sizeof scratch);
  if (extra > 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s %s has %" PRIu64 " trailing bytes after the %" PRIu64
                       " data bytes its header announces (dims %s)",
                       what, file, extra, count, dims_string(array.dims).c_str());
  }
  EC_DEBUG(kSgd, "read %s %s: dims %s", what, file, dims_string(array.dims).c_str());
  return array;
}

Status write_idx_file(const std::string& path, const IdxArray& array, bool gzip) {
  const int ndims = static_cast<int>(array.dims.size());
  if (ndims < 1 || ndims > kIdxMaxDims) {
    return make_status(StatusCode::kInvalidArgument,
                       "writing IDX file %s: %d dimensions; 1 to %d are supported", path.c_str(),
                       ndims, kIdxMaxDims);
  }
  const uint64_t count = bounded_element_count(array.dims);
  if (count > kIdxMaxElements || count != array.data.size()) {
    return make_status(StatusCode::kInvalidArgument,
                       "writing IDX file %s: dims %s do not match the %zu data bytes", path.c_str(),
                       dims_string(array.dims).c_str(), array.data.size());
  }
  std::vector<uint8_t> bytes = {0, 0, kIdxTypeU8, static_cast<uint8_t>(ndims)};
  for (uint32_t d : array.dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());

  return write_file_bytes(path, bytes, gzip);
}

Status write_file_bytes(const std::string& path, std::span<const uint8_t> bytes, bool gzip) {
  if (gzip) {
    gzFile gz = gzopen(path.c_str(), "wb");
    if (gz == nullptr) {
      return make_status(StatusCode::kIoError, "cannot create %s: %s", path.c_str(),
                         std::strerror(errno));
    }
    // gzwrite takes an unsigned count: chunks keep large arrays from overflowing it.
    size_t done = 0;
    bool ok = true;
    while (ok && done < bytes.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes.size() - done, 1 << 20));
      ok = gzwrite(gz, bytes.data() + done, chunk) == static_cast<int>(chunk);
      done += chunk;
    }
    const bool closed = gzclose(gz) == Z_OK;
    if (!ok || !closed) {
      return make_status(StatusCode::kIoError, "writing gzip-compressed file %s failed",
                         path.c_str());
    }
    return Status::Ok();
  }
  FilePtr file(std::fopen(path.c_str(), "wb"));
  if (!file) {
    return make_status(StatusCode::kIoError, "cannot create %s: %s", path.c_str(),
                       std::strerror(errno));
  }
  // An empty span may carry a null pointer, which fwrite must not see.
  const bool ok =
      bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size();
  // fclose flushes: its failure is a write failure too.
  const bool closed = std::fclose(file.release()) == 0;
  if (!ok || !closed) {
    return make_status(StatusCode::kIoError, "writing %s: %s", path.c_str(), std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace eagercomm::sgd
