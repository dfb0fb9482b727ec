#include "runtime/file_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <thread>

#include "runtime/deadline.h"

namespace eagercomm {
namespace {

Status io_error(const char* what, const std::string& path) {
  return make_status(StatusCode::kIoError, "file store: %s %s: %s", what, path.c_str(),
                     strerror(errno));
}

Result<Bytes> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", path);
  Bytes out;
  uint8_t buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = io_error("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

Status write_all(int fd, const uint8_t* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return io_error("cannot write", path);
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

Result<std::unique_ptr<FileStore>> FileStore::open(const std::string& dir) {
  if (dir.empty()) {
    return Status(StatusCode::kInvalidArgument, "file store: empty directory name");
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return io_error("cannot create", dir);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return make_status(StatusCode::kInvalidArgument, "file store: %s is not a directory",
                       dir.c_str());
  }
  return std::unique_ptr<FileStore>(new FileStore(dir));
}

std::string FileStore::path_of(const std::string& key) const {
  static const char kHex[] = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  return dir_ + "/" + name;
}

Status FileStore::set(const std::string& key, const Bytes& value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = path_of(key);
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create", tmp);
  Status s = write_all(fd, value.data(), value.size(), tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = io_error("cannot rename to", path);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Status FileStore::wait(const std::vector<std::string>& keys, std::chrono::nanoseconds timeout) {
  EC_RETURN_IF_ERROR(check_store_timeout(timeout));
  const auto deadline = deadline_after(timeout);
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    std::string missing;
    for (const auto& k : keys) {
      if (exists(path_of(k))) continue;
      missing += (missing.empty() ? "" : ", ") + k;
    }
    if (missing.empty()) return Status::Ok();
    if (!is_forever(deadline) && std::chrono::steady_clock::now() >= deadline) {
      return make_status(StatusCode::kTimeout, "store: keys not set within the timeout: %s",
                         missing.c_str());
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

Result<Bytes> FileStore::get(const std::string& key, std::chrono::nanoseconds timeout) {
  EC_RETURN_IF_ERROR(wait({key}, timeout));
  return read_file(path_of(key));
}

Result<int64_t> FileStore::add(const std::string& key, int64_t delta) {
  const std::string path = path_of(key);
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) return io_error("cannot open", lock_path);
  while (::flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) {
      Status s = io_error("cannot lock", lock_path);
      ::close(lock);
      return s;
    }
  }
  int64_t value = 0;
  Status s;
  if (exists(path)) {
    Result<Bytes> old = read_file(path);
    if (!old.ok()) {
      s = old.status();
    } else if (old->size() == sizeof(value)) {
      std::memcpy(&value, old->data(), sizeof(value));
    } else if (!old->empty()) {
      s = make_status(StatusCode::kInvalidArgument, "store key '%s' does not hold a counter",
                      key.c_str());
    }
  }
  if (s.ok()) {
    value += delta;
    Bytes b(sizeof(value));
    std::memcpy(b.data(), &value, sizeof(value));
    s = set(key, b);
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  if (!s.ok()) return s;
  return value;
}

}  // namespace eagercomm
