#include "transport/verbs/verbs_wire.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "runtime/hash.h"

namespace eagercomm::verbs {
namespace {

constexpr uint32_t kAddressMagic = 0x45435641;  // "ECVA"
constexpr uint32_t kKeyMagic = 0x4543564b;      // "ECVK"
constexpr uint32_t kHelloMagic = 0x45435648;    // "ECVH"
// 2: the address carries the rdma_cm endpoint (verbs_connect.h).
constexpr uint16_t kVersion = 4;  // 3: the GID type; 4: no queue pairs with rdma_cm
// The most ranks an address may describe: bounds what a decoder allocates for a peer's blob.
constexpr uint32_t kMaxRanks = 1u << 20;

// Little-endian fields appended to a byte vector.
class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_bytes(const uint8_t* p, size_t n) { out_.insert(out_.end(), p, p + n); }
  // Appends the checksum of everything so far.
  std::vector<uint8_t> finish() {
    put(fnv1a(out_.data(), out_.size()));
    return std::move(out_);
  }

 private:
  std::vector<uint8_t> out_;
};

// Reads fields in order; every read is bounds-checked and a short blob fails once, at the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <class T>
  T get() {
    T v{};
    if (in_.size() - at_ < sizeof(T)) {
      short_ = true;
      return v;
    }
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  void get_bytes(uint8_t* p, size_t n) {
    if (in_.size() - at_ < n) {
      short_ = true;
      return;
    }
    std::memcpy(p, in_.data() + at_, n);
    at_ += n;
  }
  bool short_read() const { return short_; }
  size_t offset() const { return at_; }

 private:
  std::span<const uint8_t> in_;
  size_t at_ = 0;
  bool short_ = false;
};

Status bad(const std::string& what, const char* why) {
  return make_status(StatusCode::kProtocolError, "verbs: %s: %s", what.c_str(), why);
}

// Checks the checksum in the last 8 bytes against the rest.
bool checksum_ok(std::span<const uint8_t> blob) {
  if (blob.size() < 8) return false;
  uint64_t sum;
  std::memcpy(&sum, blob.data() + blob.size() - 8, 8);
  return sum == fnv1a(blob.data(), blob.size() - 8);
}

}  // namespace

std::vector<uint8_t> encode_address(const QpAddress& a) {
  Writer w;
  w.put(kAddressMagic);
  w.put(kVersion);
  w.put(uint16_t{0});
  w.put(a.rank);
  w.put(a.job_size);
  w.put(a.instance);
  w.put(a.link);
  w.put(a.port);
  w.put(a.lid);
  w.put(a.mtu);
  w.put(static_cast<uint8_t>(a.use_gid));
  w.put(a.gid_index);
  w.put(static_cast<uint8_t>(a.gid_roce_v2));
  w.put(uint8_t{0});
  w.put_bytes(a.gid.data(), a.gid.size());
  w.put(a.credit_addr);
  w.put(a.credit_rkey);
  w.put(static_cast<uint8_t>(a.offers_cm));
  w.put(a.cm_family);
  w.put(a.cm_port);
  w.put_bytes(a.cm_ip.data(), a.cm_ip.size());
  for (size_t i = 0; !a.offers_cm && i < a.qps.size(); ++i) {
    w.put(a.qps[i].qpn);
    w.put(a.qps[i].psn);
  }
  return w.finish();
}

Result<QpAddress> decode_address(std::span<const uint8_t> blob, int expected_rank, int job_size) {
  const std::string what = "address of rank " + std::to_string(expected_rank);
  Reader r(blob);
  const auto magic = r.get<uint32_t>();
  const auto version = r.get<uint16_t>();
  r.get<uint16_t>();
  if (r.short_read() || magic != kAddressMagic) return bad(what, "not a verbs address");
  if (version != kVersion) {
    return make_status(StatusCode::kProtocolError,
                       "verbs: %s: format version %u, this build speaks %u (mixed eagercomm "
                       "versions in one job?)",
                       what.c_str(), version, kVersion);
  }
  QpAddress a;
  a.rank = r.get<int32_t>();
  const auto count = r.get<uint32_t>();
  a.instance = r.get<uint64_t>();
  a.link = r.get<uint8_t>();
  a.port = r.get<uint8_t>();
  a.lid = r.get<uint16_t>();
  a.mtu = r.get<uint32_t>();
  const auto use_gid = r.get<uint8_t>();
  a.gid_index = r.get<uint8_t>();
  const auto gid_roce_v2 = r.get<uint8_t>();
  r.get<uint8_t>();
  r.get_bytes(a.gid.data(), a.gid.size());
  a.credit_addr = r.get<uint64_t>();
  a.credit_rkey = r.get<uint32_t>();
  const auto offers_cm = r.get<uint8_t>();
  a.cm_family = r.get<uint8_t>();
  a.cm_port = r.get<uint16_t>();
  r.get_bytes(a.cm_ip.data(), a.cm_ip.size());
  if (r.short_read()) return bad(what, "truncated header");
  // Queue pairs follow for the store path only (over rdma_cm they are made on demand).
  const size_t entries = offers_cm == 0 ? count : 0;
  if (count > kMaxRanks || blob.size() != r.offset() + entries * 8 + 8) {
    return bad(what, "length does not match its rank count");
  }
  if (!checksum_ok(blob)) return bad(what, "checksum mismatch (corrupted in the store?)");
  if (a.rank != expected_rank) {
    return make_status(StatusCode::kProtocolError, "verbs: %s names rank %d", what.c_str(), a.rank);
  }
  if (static_cast<int64_t>(count) != job_size) {
    return make_status(StatusCode::kProtocolError,
                       "verbs: %s describes a job of %u ranks, this job has %d (ranks started "
                       "with different world sizes?)",
                       what.c_str(), count, job_size);
  }
  if (use_gid > 1 || gid_roce_v2 > 1 || a.link > 2 || a.port == 0) {
    return bad(what, "impossible port fields");
  }
  a.use_gid = use_gid == 1;
  a.gid_roce_v2 = gid_roce_v2 == 1;
  if (a.mtu < 256 || a.mtu > 4096 || (a.mtu & (a.mtu - 1)) != 0) {
    return bad(what, "MTU is not one of 256, 512, 1024, 2048, 4096");
  }
  // One encoding per endpoint (the fuzz target checks that what decodes re-encodes the same).
  const auto zero_from = [&a](size_t from) {
    return std::all_of(a.cm_ip.begin() + from, a.cm_ip.end(), [](uint8_t b) { return b == 0; });
  };
  if (offers_cm > 1) return bad(what, "impossible rdma_cm flag");
  a.offers_cm = offers_cm == 1;
  if (a.offers_cm) {
    if ((a.cm_family != 4 && a.cm_family != 6) || a.cm_port == 0 ||
        (a.cm_family == 4 && !zero_from(4))) {
      return bad(what, "rdma_cm endpoint is not an IPv4 / IPv6 address with a port");
    }
  } else if (a.cm_family != 0 || a.cm_port != 0 || !zero_from(0)) {
    return bad(what, "rdma_cm endpoint fields set without the rdma_cm flag");
  }
  a.job_size = count;
  a.qps.resize(entries);
  for (size_t i = 0; i < entries; ++i) {
    a.qps[i].qpn = r.get<uint32_t>();
    a.qps[i].psn = r.get<uint32_t>();
    if (a.qps[i].qpn > kMaxQpNumber || a.qps[i].psn > kMaxPsn) {
      return bad(what, "QP number or PSN wider than 24 bits");
    }
  }
  return a;
}

std::vector<uint8_t> encode_hello(const CmHello& h) {
  Writer w;
  w.put(kHelloMagic);
  w.put(kVersion);
  w.put(uint16_t{0});
  w.put(h.from);
  w.put(h.to);
  w.put(h.instance);
  return w.finish();
}

Result<CmHello> decode_hello(std::span<const uint8_t> blob, int expected_to, int job_size) {
  const std::string what = "rdma_cm private data";
  if (blob.size() < kCmHelloBytes) return bad(what, "too short (not an eagercomm peer?)");
  if (!std::all_of(blob.begin() + kCmHelloBytes, blob.end(), [](uint8_t b) { return b == 0; })) {
    return bad(what, "unexpected bytes after the hello");
  }
  const std::span<const uint8_t> body = blob.first(kCmHelloBytes);
  Reader r(body);
  const auto magic = r.get<uint32_t>();
  const auto version = r.get<uint16_t>();
  r.get<uint16_t>();
  CmHello h;
  h.from = r.get<int32_t>();
  h.to = r.get<int32_t>();
  h.instance = r.get<uint64_t>();
  if (r.short_read() || magic != kHelloMagic) return bad(what, "not an eagercomm hello");
  if (version != kVersion) return bad(what, "format version differs (mixed eagercomm versions?)");
  if (!checksum_ok(body)) return bad(what, "checksum mismatch");
  if (h.to != expected_to) {
    return make_status(StatusCode::kProtocolError,
                       "verbs: %s is addressed to rank %d, this is rank %d", what.c_str(), h.to,
                       expected_to);
  }
  if (h.from < 0 || h.from >= job_size || h.from == h.to) {
    return make_status(StatusCode::kProtocolError,
                       "verbs: %s comes from rank %d, not another rank of this job of %d",
                       what.c_str(), h.from, job_size);
  }
  return h;
}

std::vector<uint8_t> encode_key(const RegionKey& k) {
  Writer w;
  w.put(kKeyMagic);
  w.put(kVersion);
  w.put(static_cast<uint8_t>(k.kind));
  w.put(uint8_t{0});
  w.put(k.owner);
  w.put(k.rkey);
  w.put(k.instance);
  w.put(k.addr);
  w.put(k.length);
  return w.finish();
}

Result<RegionKey> decode_key(std::span<const uint8_t> blob, int expected_owner,
                             uint64_t expected_instance) {
  const std::string what = "remote key from rank " + std::to_string(expected_owner);
  Reader r(blob);
  const auto magic = r.get<uint32_t>();
  const auto version = r.get<uint16_t>();
  const auto kind = r.get<uint8_t>();
  r.get<uint8_t>();
  RegionKey k;
  k.owner = r.get<int32_t>();
  k.rkey = r.get<uint32_t>();
  k.instance = r.get<uint64_t>();
  k.addr = r.get<uint64_t>();
  k.length = r.get<uint64_t>();
  if (r.short_read() || magic != kKeyMagic) return bad(what, "not a verbs remote key");
  if (version != kVersion) return bad(what, "unknown format version");
  if (blob.size() != r.offset() + 8) return bad(what, "wrong length");
  if (!checksum_ok(blob)) return bad(what, "checksum mismatch");
  if (k.owner != expected_owner) {
    return make_status(StatusCode::kProtocolError, "verbs: %s was made by rank %d", what.c_str(),
                       k.owner);
  }
  if (k.instance != expected_instance) {
    return bad(what,
               "made by another transport instance (a key from an earlier job or "
               "communicator?)");
  }
  if (kind > static_cast<uint8_t>(KeyKind::kCudaStaged)) return bad(what, "unknown memory kind");
  k.kind = static_cast<KeyKind>(kind);
  if (k.length == 0 || k.addr + k.length < k.addr) return bad(what, "empty or wrapping range");
  return k;
}

}  // namespace eagercomm::verbs
