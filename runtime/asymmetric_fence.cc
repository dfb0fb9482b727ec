#include "runtime/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/log.h"

namespace eagercomm {
namespace {

long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

bool register_once() {
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
      (supported & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0) {
    EC_DEBUG(kInit, "membarrier GLOBAL_EXPEDITED unsupported: notifications use full fences");
    return false;
  }
  if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0) {
    EC_DEBUG(kInit, "membarrier registration failed (%m): notifications use full fences");
    return false;
  }
  return true;
}

}  // namespace

bool asymmetric_fences_available() {
  static const bool available = register_once();
  return available;
}

void heavy_fence() {
  if (asymmetric_fences_available() && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace eagercomm
