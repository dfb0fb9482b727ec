// The remote key of a CUDA device region of the `shm` transport (issue #6): what a peer process
// needs to reach the region through CUDA IPC, packed into the blob that import_region() takes.
//
// Layout (host byte order: every reader is on the same host), 108 bytes:
//   u32 magic "ECGI" | u8 version | u8 memory kind (kCuda) | u16 zero | i32 owner rank |
//   u64 bytes | u64 offset | u64 process | u64 address | 64 bytes cudaIpcMemHandle_t
// The magic differs from the shm host key's ("ECSH") and the kind byte must say kCuda, so a host
// key is never read as a device key, nor the reverse.
//
// `offset` is where the region starts in the allocation the handle names (a registered range
// need not start at its cudaMalloc's base). `process` and `address` let an importer in the very
// process that owns the region use the device pointer directly: cudaIpcOpenMemHandle refuses
// handles of its own process, and there the pointer is valid as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/gpu.h"
#include "runtime/status.h"

namespace eagercomm {

inline constexpr size_t kCudaIpcKeyBytes = 108;
// Largest region a key may name (64 TiB, as shm host keys): keeps offset + bytes from overflow.
inline constexpr uint64_t kCudaIpcMaxBytes = uint64_t{1} << 46;

struct CudaIpcKey {
  int32_t owner = -1;
  uint64_t bytes = 0;
  uint64_t offset = 0;   // of the region in the allocation `handle` names
  uint64_t process = 0;  // the owner process's cuda_ipc_process_token()
  uint64_t address = 0;  // the region's device address in the owner process
  gpu::IpcHandle handle{};

  std::vector<uint8_t> pack() const;
  // Checks length, magic, version, kind byte, owner and the size bounds; `what` names the blob
  // in errors ("remote key from rank 2"). kProtocolError when malformed.
  static Result<CudaIpcKey> unpack(std::span<const uint8_t> blob, const char* what);
  // True when the blob starts with this format's magic: a key to give unpack() rather than the
  // host key's decoder (unpack() still checks everything else).
  static bool claims(std::span<const uint8_t> blob);
};

// A token for this process, different in every process on the host (forked children too): equal
// tokens in a key and here mean one address space.
uint64_t cuda_ipc_process_token();

}  // namespace eagercomm
