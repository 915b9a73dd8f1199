// Tracepoint provider: probes on unmodified code (see attach_tracepoints in probes.hpp).
// Placeholder until the provider lands: refuses with `unsupported`.
#include "crossmod/probes.hpp"

namespace crossmod::probes {

Status attach_tracepoints(const char* pattern, const char*, std::size_t* new_probes,
                          std::size_t* refused) noexcept {
  if (new_probes != nullptr) *new_probes = 0;
  if (refused != nullptr) *refused = 0;
  if (pattern == nullptr) return Status::bad_argument;
  return Status::unsupported;
}

}  // namespace crossmod::probes
