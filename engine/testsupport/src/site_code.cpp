// Probe-site layout (see site_code.hpp). Thread safety: see there.
#include "crossmod/testsupport/site_code.hpp"

#include <cstring>

namespace crossmod::testsupport {

void fill_invalid(std::span<std::uint8_t> bytes) noexcept {
  std::memset(bytes.data(), x86::kInvalid64, bytes.size());
}

EntryFn write_entry(std::uint8_t* site, const Bytes5& state) noexcept {
  std::memcpy(site - kEntryPrologueLen, kXorEaxEax.data(), kEntryPrologueLen);
  std::memcpy(site, state.data(), state.size());
  site[state.size()] = x86::kRet;
  return entry_of(site);
}

void write_stub(std::uint8_t* at) noexcept {
  std::memcpy(at, kReturnOneStub.data(), kReturnOneStub.size());
}

EntryFn entry_of(const std::uint8_t* site) noexcept {
  return reinterpret_cast<EntryFn>(reinterpret_cast<std::uintptr_t>(site - kEntryPrologueLen));
}

}  // namespace crossmod::testsupport
