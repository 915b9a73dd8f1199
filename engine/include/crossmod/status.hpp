// Status codes returned by every engine call. The engine never throws; OS failures are
// reported as Status::os_error with the errno kept by the caller-visible std::error_code.
// Thread safety: plain values. to_string is async-signal-safe (returns a literal).
#pragma once
#include <cstdint>

namespace crossmod {

enum class [[nodiscard]] Status : std::uint8_t {
  ok = 0,
  busy,           // another patcher holds this site's int3 lock; try again later
  not_writable,   // the bytes are not inside a range made writable through code_memory
  out_of_range,   // a rel32 (or trampoline) would not reach its target
  bad_bytes,      // current bytes are not the expected call / known NOP / int3 state
  bad_length,     // patch length is 0 or over 8
  bad_address,    // null, or a layout the protocol cannot handle (e.g. spans >2 lines)
  unsupported,    // the kernel or CPU lacks a feature (e.g. membarrier SYNC_CORE)
  os_error,       // a system call failed; see the std::error_code out-parameter
  table_full,     // the lock-free site table has no free slot
  not_found,      // a config file or section does not exist
  parse_error,    // a config file is malformed or misses a field
  unverified,     // a Tmax config whose verdict is not "bounded" (or the built-in default)
                  // was refused; the output is still filled so callers can show it
};

const char* to_string(Status s) noexcept;

}  // namespace crossmod
