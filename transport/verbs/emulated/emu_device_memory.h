// Internal: memory the emulated RDMA device reaches and the CPU cannot. Not installed.
//
// What GPU memory is to a NIC with GPUDirect RDMA: the device reads and writes it, while a CPU
// load or store through the application's pointer faults (as dereferencing a device pointer
// does). One memfd mapped twice: PROT_NONE at the address the application holds and registers,
// read-write at an alias only the emulated device (and the copy functions below, standing in for
// cudaMemcpy) uses. A provider that copies such memory with the CPU, as inline sends do, crashes
// here as it would on a ConnectX NIC (issue 18, defect 1).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/status.h"

namespace eagercomm::verbs::emu {

class DeviceMemory {
 public:
  static Result<DeviceMemory> allocate(size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& o) noexcept;
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  // The application's address: not readable by the CPU.
  void* data() const { return app_; }
  size_t size() const { return bytes_; }
  // Copies through the device's view (cudaMemcpy's role); out-of-range copies are refused.
  Status copy_in(size_t offset, const void* src, size_t n);
  Status copy_out(size_t offset, void* dst, size_t n) const;

 private:
  void reset();
  void* app_ = nullptr;
  void* alias_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;
};

// Where the emulated device reaches [addr, addr + length): the alias when the range lies in one
// DeviceMemory of this process, `addr` itself otherwise (host memory).
uint64_t device_address(uint64_t addr, uint64_t length);
// Whether [addr, addr + length) lies in one DeviceMemory of this process.
bool is_device_memory(const void* addr, size_t length);

}  // namespace eagercomm::verbs::emu
