// libFuzzer target: the verbs address, rdma_cm hello and remote-key decoders (what a peer publishes
// through the store). Any input must decode or fail with a Status; a blob that decodes must
// re-encode to the same bytes (the decoder accepted nothing it did not check).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "transport/verbs/verbs_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace eagercomm::verbs;
  if (size < 1) return 0;
  const int job = 1 + data[0] % 8;  // the expected job size and rank come from the first byte
  const int rank = (data[0] >> 3) % job;
  const std::span<const uint8_t> blob(data + 1, size - 1);
  if (auto a = decode_address(blob, rank, job); a.ok()) {
    const std::vector<uint8_t> again = encode_address(a.value());
    if (again.size() != blob.size() || std::memcmp(again.data(), blob.data(), blob.size()) != 0) {
      std::abort();
    }
  }
  if (auto h = decode_hello(blob, rank, job); h.ok()) {
    if (h.value().to != rank || h.value().from == rank || h.value().from >= job) std::abort();
    const std::vector<uint8_t> again = encode_hello(h.value());
    if (std::memcmp(again.data(), blob.data(), again.size()) != 0) std::abort();
  }
  if (auto k = decode_key(blob, rank, 42); k.ok()) {
    if (k.value().length == 0 || k.value().addr + k.value().length < k.value().addr) std::abort();
  }
  return 0;
}
