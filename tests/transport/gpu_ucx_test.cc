// The ucx backend and GPU memory (issue #6): MemoryKind::kCuda goes to UCX as
// UCS_MEMORY_TYPE_CUDA when the UCX build handles CUDA memory, and is refused clearly otherwise
// (Debian's UCX 1.13 has no CUDA support). The decision is tested without UCX's help; a real
// transport is asked too, and answers according to the UCX here.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "runtime/build_config.h"
#include "runtime/gpu.h"
#include "transport/registry.h"
#if EAGERCOMM_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace eagercomm {
namespace {

#if EAGERCOMM_HAVE_UCX

TEST(GpuUcx, MemoryKindDecision) {
  EXPECT_TRUE(ucx_memory_kind_supported(MemoryKind::kHost, false).ok());
  EXPECT_TRUE(ucx_memory_kind_supported(MemoryKind::kHost, true).ok());
  EXPECT_TRUE(ucx_memory_kind_supported(MemoryKind::kCuda, true).ok());
  const Status s = ucx_memory_kind_supported(MemoryKind::kCuda, false);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("UCX built with CUDA support"), std::string::npos) << s.message();
}

// This UCX: a one-rank transport refuses CUDA memory with the same error when UCX has no CUDA
// support, and without a GPU no CUDA allocation can succeed in any case.
TEST(GpuUcx, ThisUcxAnswersClearly) {
  TransportParams p;
  p.rank = 0;
  p.size = 1;
  auto t = create_ucx_transport(p);
  if (!t.ok()) GTEST_SKIP() << "no ucx transport here: " << t.status().to_string();
  auto r = t.value()->allocate(4096, MemoryKind::kCuda);
  if (r.ok()) {
    ASSERT_FALSE(gpu::query().devices.empty()) << "a CUDA allocation without a GPU";
    return;
  }
  std::printf("ucx allocate(kCuda) here: %s\n", r.status().to_string().c_str());
  EXPECT_TRUE(r.status().code() == StatusCode::kNotSupported ||
              r.status().code() == StatusCode::kUnavailable)
      << r.status().to_string();
  std::vector<float> host(16);
  auto reg = t.value()->register_memory(host.data(), 64, MemoryKind::kCuda);
  EXPECT_FALSE(reg.ok());
}

#else

TEST(GpuUcx, NotBuilt) { GTEST_SKIP() << "this build has no UCX"; }

#endif

}  // namespace
}  // namespace eagercomm
