#include "runtime/status.h"

#include <cstdarg>
#include <cstdio>

namespace eagercomm {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInProgress:
      return "in progress";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kMismatch:
      return "mismatch between ranks";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kPeerFailed:
      return "peer failed";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kNotSupported:
      return "not supported";
    case StatusCode::kNoMemory:
      return "out of memory";
    case StatusCode::kBusy:
      return "busy";
    case StatusCode::kProtocolError:
      return "protocol error";
    case StatusCode::kIoError:
      return "i/o error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown status";
}

std::string Status::to_string() const {
  std::string out(status_code_name(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status& Status::prepend(std::string_view context) {
  if (!ok()) message_.insert(0, context);
  return *this;
}

Status make_status(StatusCode code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

}  // namespace eagercomm
