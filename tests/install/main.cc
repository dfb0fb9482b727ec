// Uses an installed eagercomm through its public include paths; prints "OK ..." on success.
#include <cstdio>

#include <eagercomm/collectives/dtype.h>
#include <eagercomm/runtime/build_config.h>
#include <eagercomm/runtime/status.h>

int main() {
  eagercomm::Result<eagercomm::DataType> f32 = eagercomm::parse_dtype("f32");
  if (!f32.ok()) {
    std::fprintf(stderr, "parse_dtype(\"f32\") failed: %s\n", f32.status().to_string().c_str());
    return 1;
  }
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
  std::printf("OK eagercomm %s (%s)\n", EAGERCOMM_VERSION_STRING, EAGERCOMM_BUILD_TYPE);
  return 0;
}
