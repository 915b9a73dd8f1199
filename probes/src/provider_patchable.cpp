// Provider for -fpatchable-function-entry=N[,M] (N - M >= 5): sites come from every
// `__patchable_function_entries` section of every loaded object (dl_iterate_phdr, the
// section headers of its file). Each sled starts OFF. The first time an object is
// scanned, GCC's five single-byte NOPs are rewritten into this site's callpatch-inactive
// form (a single instruction or a short jump), so that later toggles meet the engine's
// layout-equivalence constraint; activation writes a call to the shared entry trampoline
// (trampoline_x86_64.S) directly or through a far thunk. Each site also carries an exit
// probe: while it is active, the entry trampoline redirects the function's return
// address to the exit trampoline (per-thread shadow stack; longjmp-safe; exceptions and
// pthread_exit write the thread's redirected frames back first - unwind_interpose.cpp).
// The call stays in place while either probe is on.
// Thread safety: scan_loaded_objects is thread-safe (registry mutex); its precondition is
// that no thread executes a newly scanned object's sleds during the call (true in a
// library constructor before main, or right after dlopen before the new code is used).
#include <cstring>
#include <vector>

#include "crossmod/x86.hpp"
#include "encodings.hpp"
#include "objects.hpp"
#include "registry.hpp"

namespace crossmod::probes {

using namespace detail;

namespace {
inline constexpr const char* kSection = "__patchable_function_entries";
// GCC records the first NOP; with M > 0 that is M bytes before the function symbol.
inline constexpr std::uintptr_t kMaxPrefixNops = 16;
}  // namespace

Status scan_loaded_objects(std::size_t* new_probes) noexcept {
  std::vector<std::uint32_t> fresh;
  Status first = Status::ok;
  try {
    std::lock_guard<std::mutex> lock(registry_mutex());
    for (Object* obj : refresh_objects()) {
      if (obj->scanned) continue;
      obj->scanned = true;
      for (const auto& [start, size] : sections_named(*obj, kSection)) {
        for (std::size_t off = 0; off + sizeof(std::uintptr_t) <= size; off += sizeof(std::uintptr_t)) {
          std::uintptr_t rec = 0;
          std::memcpy(&rec, reinterpret_cast<const void*>(start + off), sizeof rec);
          if (rec == 0) continue;
          Segment* seg = nullptr;
          if (object_for_code(rec, x86::kCallLen, &seg) != obj) continue;
          // Skip the M NOPs before the entry: the site is the function's first byte.
          std::uintptr_t site = rec;
          if (const Symbol* s = symbol_starting_in(obj, rec + 1, rec + kMaxPrefixNops + 1)) {
            bool nops = true;
            for (std::uintptr_t a = rec; a < s->addr; ++a)
              nops = nops && *reinterpret_cast<const std::uint8_t*>(a) == enc::kNop1;
            if (nops) site = s->addr;
          }
          if (find_site(site) < kMaxProbes) continue;
          NewProbe np;
          np.site = site;
          const Symbol* fs = symbol_for(obj, site);
          np.function = fs != nullptr ? fs->addr : site;
          np.kind = Kind::entry;
          np.provider = Provider::patchable;
          np.form = Form::call;
          np.start_active = false;
          Status ts = Status::ok;
          np.call_target = entry_trampoline_near(site, &ts);
          if (ts != Status::ok) {
            if (first == Status::ok) first = ts;
            continue;
          }
          Status rs = Status::ok;
          const std::uint32_t id = register_probe_locked(np, &rs);
          if (id == kNone) {
            if (first == Status::ok) first = rs;
            continue;
          }
          fresh.push_back(id);
          const std::uint32_t exit_id = register_exit_partner_locked(id, &rs);
          if (exit_id != kNone) fresh.push_back(exit_id);
          else if (first == Status::ok) first = rs;
        }
      }
    }
  } catch (...) {
    return Status::engine_error;
  }
  if (new_probes != nullptr) *new_probes = fresh.size();
  for (std::uint32_t id : fresh) announce(id);
  return first;
}

}  // namespace crossmod::probes
