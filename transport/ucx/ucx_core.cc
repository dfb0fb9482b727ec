#include "transport/ucx/ucx_core.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "transport/ucx/ucx_transport.h"

namespace eagercomm::ucx {

// True when the context may reach peers through shared memory (or when we cannot tell).
// UCP has no query for the transports in use, so this reads ucp_context_print_info's resource
// lines ("#   resource 3  :  md 2  dev 0  flags -- sysv/memory").
bool context_has_shared_memory(ucp_context_h context) {
  char* text = nullptr;
  size_t length = 0;
  FILE* f = open_memstream(&text, &length);
  if (f == nullptr) return true;
  ucp_context_print_info(context, f);
  fclose(f);
  std::unique_ptr<char, decltype(&free)> owned(text, &free);
  std::istringstream lines(std::string(text ? text : "", length));
  bool any = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("resource") == std::string::npos) continue;
    const size_t dashes = line.rfind("-- ");
    if (dashes == std::string::npos) continue;
    any = true;
    const std::string tl = line.substr(dashes + 3, line.find('/', dashes) - dashes - 3);
    if (tl == "posix" || tl == "sysv" || tl == "xpmem" || tl == "cma" || tl == "knem") return true;
  }
  return !any;
}

Result<ucs_memory_type_t> memory_type_of(MemoryKind kind, bool ucx_has_cuda) {
  EC_RETURN_IF_ERROR(ucx_memory_kind_supported(kind, ucx_has_cuda));
  return kind == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

StatusCode code_of(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_EXCEEDS_LIMIT:
      return StatusCode::kNoMemory;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
      return StatusCode::kPeerFailed;
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
      return StatusCode::kUnavailable;
    case UCS_ERR_UNSUPPORTED:
      return StatusCode::kNotSupported;
    case UCS_ERR_INVALID_PARAM:
      return StatusCode::kInvalidArgument;
    case UCS_ERR_NO_RESOURCE:
      return StatusCode::kBusy;
    default:
      return StatusCode::kIoError;
  }
}

Status ucx_failure(ucs_status_t s, const std::string& what) {
  EC_ERROR(kNet, "ucx: %s: %s", what.c_str(), ucs_status_string(s));
  return make_status(code_of(s), "ucx: %s: %s", what.c_str(), ucs_status_string(s));
}

std::string tls_hint() {
  const char* tls = getenv("UCX_TLS");
  return std::string("UCX_TLS=") + (tls ? tls : "(unset)");
}

}  // namespace eagercomm::ucx
