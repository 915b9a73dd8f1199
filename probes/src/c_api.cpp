// The C interface (crossmod/probes.h): thin wrappers over crossmod/probes.hpp.
// Thread safety: as the C++ functions they call.
#include "crossmod/probes.h"

#include <vector>

#include "crossmod/probes.hpp"

namespace cp = crossmod::probes;

namespace {
int code(cp::Status s) { return static_cast<int>(s); }

struct DiscoveryTrampoline {
  crossmod_discovery_fn fn = nullptr;
  void* user = nullptr;
};
DiscoveryTrampoline g_c_discovery;  // written under the caller's own serialization

void c_discovery(const cp::ProbeInfo& info, void* user) {
  auto* t = static_cast<DiscoveryTrampoline*>(user);
  crossmod_probe_info ci{};
  ci.id = info.id;
  ci.function = info.function;
  ci.name = info.name;
  ci.object = info.object;
  ci.kind = static_cast<int>(info.kind);
  ci.site = info.site;
  ci.split = info.split;
  ci.provider = static_cast<int>(info.provider);
  ci.strategy = static_cast<int>(info.strategy);
  ci.active = info.active ? 1 : 0;
  ci.fn = info.fn;
  if (t->fn != nullptr) t->fn(&ci, t->user);
}
}  // namespace

extern "C" {

const char* crossmod_probe_status_string(int status) {
  if (status < 0 || status > CROSSMOD_PROBE_ENGINE_ERROR) return "unknown";
  return cp::to_string(static_cast<cp::Status>(status));
}

int crossmod_probes_on_discovery(crossmod_discovery_fn cb, void* user) {
  g_c_discovery.fn = cb;
  g_c_discovery.user = user;
  return code(cp::on_discovery(cb != nullptr ? c_discovery : nullptr, &g_c_discovery));
}

int crossmod_probes_scan(size_t* new_probes) { return code(cp::scan_loaded_objects(new_probes)); }

int crossmod_probe_info_get(crossmod_probe_id id, crossmod_probe_info* out) {
  if (out == nullptr) return CROSSMOD_PROBE_BAD_ARGUMENT;
  cp::ProbeInfo info;
  if (cp::Status s = cp::info(id, &info); s != cp::Status::ok) return code(s);
  DiscoveryTrampoline t;
  t.fn = [](const crossmod_probe_info* ci, void* user) { *static_cast<crossmod_probe_info*>(user) = *ci; };
  t.user = out;
  c_discovery(info, &t);
  return CROSSMOD_PROBE_OK;
}

size_t crossmod_probes_count(void) { return cp::count(); }
int crossmod_probe_activate(crossmod_probe_id id, crossmod_probe_fn fn) {
  return code(cp::activate(id, fn));
}
int crossmod_probe_deactivate(crossmod_probe_id id) { return code(cp::deactivate(id)); }
int crossmod_probe_set_strategy(crossmod_probe_id id, int strategy) {
  if (strategy < CROSSMOD_STRATEGY_CALLPATCH || strategy > CROSSMOD_STRATEGY_WORDPATCH_ASYNC)
    return CROSSMOD_PROBE_BAD_ARGUMENT;
  return code(cp::set_strategy(id, static_cast<cp::Strategy>(strategy)));
}
int crossmod_probes_flush(void) { return code(cp::flush()); }
int crossmod_probes_activate_matching(const char* pattern, crossmod_probe_fn fn, size_t* toggled) {
  return code(cp::activate_matching(pattern, fn, toggled));
}
int crossmod_probes_deactivate_matching(const char* pattern, size_t* toggled) {
  return code(cp::deactivate_matching(pattern, toggled));
}
int crossmod_probes_activate_all(crossmod_probe_fn fn, size_t* toggled) {
  return code(cp::activate_all(fn, toggled));
}
int crossmod_probes_deactivate_all(size_t* toggled) { return code(cp::deactivate_all(toggled)); }
int crossmod_probes_attach_tracepoints(const char* pattern, const char* object_pattern,
                                       size_t* new_probes, size_t* refused) {
  return code(cp::attach_tracepoints(pattern, object_pattern, new_probes, refused));
}
int crossmod_probes_attach_tracepoint_at(const void* function, size_t* new_probes, size_t* refused) {
  return code(cp::attach_tracepoint_at(function, new_probes, refused));
}

size_t crossmod_probes_tracepoint_refusals(crossmod_tracepoint_refusal* out, size_t capacity) {
  if (out == nullptr) capacity = 0;
  try {
    std::vector<cp::TracepointRefusal> v(capacity);
    const std::size_t total = cp::tracepoint_refusals(v.data(), capacity);
    for (std::size_t i = 0; i < capacity && i < total; ++i)
      out[i] = {v[i].function, v[i].name, v[i].object, v[i].reason, v[i].entry_probe ? 1 : 0};
    return total;
  } catch (...) {
    return 0;  // no memory for the copy
  }
}

int crossmod_probes_exclude_from_tracepoints(const void* address) {
  return code(cp::exclude_from_tracepoints(address));
}

void crossmod_probes_set_tracepoint_trap_fallback(int on) { cp::set_tracepoint_trap_fallback(on != 0); }

int crossmod_probe_tracepoint_trap_mode(crossmod_probe_id id) {
  return cp::tracepoint_trap_mode(id) ? 1 : 0;
}

uint64_t crossmod_probe_exit_hook_tsc(void) { return cp::exit_hook_tsc(); }

}  // extern "C"
