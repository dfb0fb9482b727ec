// Mismatched collective calls, for the thread-rank (mismatch_test.cc) and process-rank
// (mp_collectives_test.cc) suites: every ordered pair of two different calls from kCalls, the
// first made by rank 0 and the second by every other rank, must fail with kMismatch on every
// rank well before the call's timeout, and leave the communicator usable. The calls cover every
// collective, every algorithm the default configuration picks (small boxes, recursive doubling,
// ring or direct, tree and chain broadcast) and each argument a caller can get wrong (count,
// type, op, root).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace eagercomm::test {

enum class CallKind { kAllreduce, kBroadcast, kAllgather, kBarrier };

struct CollectiveCall {
  const char* name;
  CallKind kind;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // broadcast; -1: the last rank
};

// Counts around EAGERCOMM_SMALL_MAX_BYTES (8 KiB: 2048 f32) and EAGERCOMM_RD_MAX_BYTES (16 KiB).
inline const std::vector<CollectiveCall>& mismatch_calls() {
  static const std::vector<CollectiveCall> calls = {
      {"allreduce(16 f32 sum) [small boxes]", CallKind::kAllreduce, 16},
      {"allreduce(17 f32 sum) [small boxes]", CallKind::kAllreduce, 17},
      {"allreduce(16 i32 sum) [small boxes]", CallKind::kAllreduce, 16, DataType::kInt32},
      {"allreduce(16 f32 max) [small boxes]", CallKind::kAllreduce, 16, DataType::kFloat32,
       ReduceOp::kMax},
      {"allreduce(2048 f32 sum) [small boxes]", CallKind::kAllreduce, 2048},
      {"allreduce(2049 f32 sum) [recursive doubling]", CallKind::kAllreduce, 2049},
      {"allreduce(60000 f32 sum) [ring or direct]", CallKind::kAllreduce, 60000},
      {"broadcast(16 f32, root 0) [tree]", CallKind::kBroadcast, 16},
      {"broadcast(16 f32, root P-1) [tree]", CallKind::kBroadcast, 16, DataType::kFloat32,
       ReduceOp::kSum, -1},
      {"broadcast(60000 f32, root 0) [chain]", CallKind::kBroadcast, 60000},
      {"allgather(16 f32)", CallKind::kAllgather, 16},
      {"allgather(3000 f32)", CallKind::kAllgather, 3000},
      {"barrier", CallKind::kBarrier},
  };
  return calls;
}

// Makes `call` on `c` with buffers of its own (every element 1).
inline Status make_call(Communicator& c, const CollectiveCall& call,
                        std::chrono::nanoseconds timeout) {
  const size_t bytes = std::max<size_t>(call.count * 4, 4);  // f32 and i32 only
  std::vector<uint8_t> buf(bytes * static_cast<size_t>(c.size()), 0);
  if (call.type == DataType::kInt32) {
    std::fill_n(reinterpret_cast<int32_t*>(buf.data()), call.count, 1);
  } else {
    std::fill_n(reinterpret_cast<float*>(buf.data()), call.count, 1.0f);
  }
  switch (call.kind) {
    case CallKind::kAllreduce:
      return c.allreduce(buf.data(), buf.data(), call.count, call.type, call.op, timeout);
    case CallKind::kBroadcast:
      return c.broadcast(buf.data(), call.count, call.type,
                         call.root < 0 ? c.size() - 1 : call.root, timeout);
    case CallKind::kAllgather: {
      std::vector<uint8_t> all(bytes * static_cast<size_t>(c.size()));
      return c.allgather(buf.data(), all.data(), call.count, call.type, timeout);
    }
    case CallKind::kBarrier:
      return c.barrier(timeout);
  }
  return Status(StatusCode::kInternal, "unknown call");
}

// One rank's part in every mismatched pair: rank `odd` makes the first call, the others the
// second. Expects kMismatch within `patience` for each (the calls' own timeout is far longer, so
// a mismatch that is only found by the timeout fails), then a correct allreduce.
inline void run_every_mismatched_pair(Communicator& c, std::chrono::seconds patience, int odd = 0) {
  const auto& calls = mismatch_calls();
  const auto timeout = patience * 4;
  for (size_t a = 0; a < calls.size(); ++a) {
    for (size_t b = 0; b < calls.size(); ++b) {
      if (a == b) continue;
      const CollectiveCall& mine = c.rank() == odd ? calls[a] : calls[b];
      SCOPED_TRACE("rank " + std::to_string(odd) + ": " + calls[a].name +
                   "; the others: " + calls[b].name);
      const auto start = std::chrono::steady_clock::now();
      const Status s = make_call(c, mine, timeout);
      const auto took = std::chrono::steady_clock::now() - start;
      EXPECT_EQ(s.code(), StatusCode::kMismatch) << "rank " << c.rank() << ": " << s.to_string();
      EXPECT_LT(took, patience) << "rank " << c.rank() << " waited "
                                << std::chrono::duration<double>(took).count() << " s";
      // The communicator goes on: every rank agrees again.
      int32_t x = c.rank() + 1;
      const Status ok = c.allreduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum, timeout);
      ASSERT_TRUE(ok.ok()) << ok.to_string();
      ASSERT_EQ(x, c.size() * (c.size() + 1) / 2);
    }
  }
}

}  // namespace eagercomm::test
