// Uses an installed eagercomm through its public C++ API (the installed headers only); prints
// "OK ..." on success.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <eagercomm/collectives/communicator.h>
#include <eagercomm/collectives/dtype.h>
#include <eagercomm/collectives/partial_allreduce.h>
#include <eagercomm/runtime/build_config.h>
#include <eagercomm/runtime/status.h>

namespace {

int fail(const char* what, const eagercomm::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.to_string().c_str());
  return 1;
}

// Two ranks as threads: an allreduce without limit, a barrier with the configured timeout, a
// solo partial allreduce round and a negative timeout refused, as every rank sees them.
int two_ranks() {
  using eagercomm::DataType;
  auto world = eagercomm::make_inproc_world(2);
  if (!world.ok()) return fail("make_inproc_world(2)", world.status());
  eagercomm::Status errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      eagercomm::Communicator& comm = *world.value()[r];
      float x[2] = {float(r + 1), 1.0f};
      eagercomm::Status s = comm.allreduce(x, x, 2, DataType::kFloat32, eagercomm::ReduceOp::kSum,
                                           eagercomm::kWaitForever);
      if (s.ok() && (x[0] != 3.0f || x[1] != 2.0f)) {
        s = eagercomm::Status(eagercomm::StatusCode::kInternal, "allreduce gave wrong sums");
      }
      if (s.ok()) s = comm.barrier(eagercomm::kConfiguredTimeout);
      if (s.ok()) {
        eagercomm::Status bad = comm.barrier(std::chrono::nanoseconds(-5));
        if (bad.code() != eagercomm::StatusCode::kInvalidArgument) {
          s = eagercomm::Status(eagercomm::StatusCode::kInternal, "timeout -5ns was accepted");
        }
      }
      if (s.ok()) {
        auto pa = eagercomm::PartialAllreduce::create(comm, 2, DataType::kFloat32,
                                                      eagercomm::PartialMode::sync());
        if (!pa.ok()) s = pa.status();
        if (s.ok()) s = pa.value()->post(x, 2, DataType::kFloat32);
        if (s.ok()) {
          auto round = pa.value()->wait(eagercomm::kWaitForever);
          if (!round.ok())
            s = round.status();
          else if (round.value().as<float>()[0] != 6.0f) {
            s = eagercomm::Status(eagercomm::StatusCode::kInternal, "partial round sum wrong");
          }
        }
      }
      errors[r] = s;
    });
  }
  for (auto& t : ranks) t.join();
  for (const eagercomm::Status& s : errors) {
    if (!s.ok()) return fail("two in-process ranks", s);
  }
  return 0;
}

}  // namespace

int main() {
  eagercomm::Result<eagercomm::DataType> f32 = eagercomm::parse_dtype("f32");
  if (!f32.ok()) return fail("parse_dtype(\"f32\")", f32.status());
  if (*f32 != eagercomm::DataType::kFloat32 || eagercomm::dtype_size(*f32) != 4) {
    std::fprintf(stderr, "parse_dtype(\"f32\") returned the wrong type\n");
    return 1;
  }
  // The error path crosses the library boundary too (a Status built inside the .so).
  eagercomm::Result<eagercomm::DataType> bad = eagercomm::parse_dtype("no-such-type");
  if (bad.ok() || bad.status().code() != eagercomm::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "parse_dtype(\"no-such-type\") did not fail with invalid argument\n");
    return 1;
  }
  if (int rc = two_ranks(); rc != 0) return rc;
  std::printf("OK eagercomm %s (%s)\n", EAGERCOMM_VERSION_STRING, EAGERCOMM_BUILD_TYPE);
  return 0;
}
