// A bootstrap store in a directory shared by the ranks (a local /tmp directory for processes of
// one host, a shared filesystem across hosts): Gloo's FileStore idea. No server, so it suits
// forked test ranks and jobs where no rank can listen on a port.
//
// set() writes a temporary file and renames it into place (readers never see half a value);
// get() and wait() poll for the files with a growing back-off; add() keeps the counter under an
// flock(2). Keys are percent-encoded into file names. Thread- and process-safe.
#pragma once

#include <string>

#include "runtime/store.h"

namespace eagercomm {

class FileStore final : public Store {
 public:
  // `dir` must exist or be creatable; it is not removed by the store.
  static Result<std::unique_ptr<FileStore>> open(const std::string& dir);

  Status set(const std::string& key, const Bytes& value) override;
  Result<Bytes> get(const std::string& key, std::chrono::nanoseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) override;

  const std::string& dir() const { return dir_; }

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

}  // namespace eagercomm
