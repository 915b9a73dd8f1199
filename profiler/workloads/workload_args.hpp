// Option parsing shared by the evaluation workloads (latency_lab, kvpipe): they know nothing
// about crossmod and build standalone, so this header is all they share.
// Thread safety: pure functions.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace workload {

// A decimal unsigned integer with nothing after it (no sign, no blank, no overflow).
inline bool parse_u64(const char* s, std::uint64_t& out) {
  if (s == nullptr || *s == '\0' || *s == '-') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  out = v;
  return true;
}

}  // namespace workload
