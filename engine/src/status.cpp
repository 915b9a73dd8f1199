// Status names for logs and test output.
// Thread safety: pure; async-signal-safe (returns string literals, never allocates).
#include "crossmod/status.hpp"

namespace crossmod {

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::busy: return "busy";
    case Status::not_writable: return "not_writable";
    case Status::out_of_range: return "out_of_range";
    case Status::bad_bytes: return "bad_bytes";
    case Status::bad_length: return "bad_length";
    case Status::bad_address: return "bad_address";
    case Status::unsupported: return "unsupported";
    case Status::os_error: return "os_error";
    case Status::table_full: return "table_full";
    case Status::not_found: return "not_found";
    case Status::parse_error: return "parse_error";
    case Status::unverified: return "unverified";
  }
  return "unknown";
}

}  // namespace crossmod
