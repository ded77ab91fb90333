// base/status.cc - names and printing of Status codes (pmhash/status.h).
#include "pmhash/status.h"

namespace pmhash {

std::string_view Status::code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kAlreadyExists:
      return "AlreadyExists";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kNoSpace:
      return "NoSpace";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "IOError";
    case Code::kBusy:
      return "Busy";
    case Code::kNotSupported:
      return "NotSupported";
    case Code::kAborted:
      return "Aborted";
    case Code::kConflict:
      return "Conflict";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(code_name(code_));
  if (!msg_.empty()) {
    s += ": ";
    s += msg_;
  }
  return s;
}

}  // namespace pmhash
