/* crossmod probes, C interface: the same operations as crossmod/probes.hpp with int
 * status codes. Thread safety: every function is thread-safe and may be called from any
 * thread; toggles of one probe serialize. The probe-invocation path never allocates or
 * locks. No function is async-signal-safe. */
#ifndef CROSSMOD_PROBES_H
#define CROSSMOD_PROBES_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint32_t crossmod_probe_id;
#define CROSSMOD_NO_PROBE 0xFFFFFFFFu

/* Entry probes get the TSC at the hook; exit probes the TSC of the matching entry, 0 if
 * unknown. */
typedef void (*crossmod_probe_fn)(crossmod_probe_id id, uint64_t tsc);

enum {
  CROSSMOD_PROBE_OK = 0,
  CROSSMOD_PROBE_UNKNOWN_ID,
  CROSSMOD_PROBE_BYTES_CHANGED,
  CROSSMOD_PROBE_OUTSIDE_CODE,
  CROSSMOD_PROBE_NOT_WRITABLE,
  CROSSMOD_PROBE_OUT_OF_RANGE,
  CROSSMOD_PROBE_BUSY,
  CROSSMOD_PROBE_BAD_ARGUMENT,
  CROSSMOD_PROBE_UNSUPPORTED,
  CROSSMOD_PROBE_TABLE_FULL,
  CROSSMOD_PROBE_ENGINE_ERROR
};
enum { CROSSMOD_PROBE_ENTRY = 0, CROSSMOD_PROBE_EXIT = 1 };
enum {
  CROSSMOD_PROVIDER_CYG = 0,
  CROSSMOD_PROVIDER_PATCHABLE = 1,
  CROSSMOD_PROVIDER_MANUAL = 2,
  CROSSMOD_PROVIDER_TRACEPOINT = 3
};
enum {
  CROSSMOD_STRATEGY_CALLPATCH = 0,
  CROSSMOD_STRATEGY_WORDPATCH_SYNC = 1,
  CROSSMOD_STRATEGY_WORDPATCH_ASYNC = 2
};

typedef struct crossmod_probe_info {
  crossmod_probe_id id;
  uintptr_t function;
  const char* name;   /* demangled; valid for the life of the process */
  const char* object; /* ELF object path; valid for the life of the process */
  int kind;           /* CROSSMOD_PROBE_ENTRY / _EXIT */
  uintptr_t site;
  unsigned split;     /* bytes before a cache-line boundary, 0 if none */
  int provider;       /* CROSSMOD_PROVIDER_* */
  int strategy;       /* CROSSMOD_STRATEGY_* */
  int active;
  crossmod_probe_fn fn;
} crossmod_probe_info;

typedef void (*crossmod_discovery_fn)(const crossmod_probe_info* info, void* user);

const char* crossmod_probe_status_string(int status);
int crossmod_probes_on_discovery(crossmod_discovery_fn cb, void* user);
int crossmod_probes_scan(size_t* new_probes);
int crossmod_probe_info_get(crossmod_probe_id id, crossmod_probe_info* out);
size_t crossmod_probes_count(void);
int crossmod_probe_activate(crossmod_probe_id id, crossmod_probe_fn fn);
int crossmod_probe_deactivate(crossmod_probe_id id);
int crossmod_probe_set_strategy(crossmod_probe_id id, int strategy);
int crossmod_probes_flush(void);
int crossmod_probes_activate_matching(const char* pattern, crossmod_probe_fn fn, size_t* toggled);
int crossmod_probes_deactivate_matching(const char* pattern, size_t* toggled);
int crossmod_probes_activate_all(crossmod_probe_fn fn, size_t* toggled);
int crossmod_probes_deactivate_all(size_t* toggled);
int crossmod_probes_attach_tracepoints(const char* pattern, const char* object_pattern,
                                       size_t* new_probes, size_t* refused);
int crossmod_probes_attach_tracepoint_at(const void* function, size_t* new_probes, size_t* refused);
/* Tracepoint provider details (crossmod::probes::tracepoint_refusals & co). */
typedef struct crossmod_tracepoint_refusal {
  uintptr_t function;
  const char* name;   /* valid for the life of the process */
  const char* object;
  const char* reason;
  int entry_probe;    /* 1: only the exit probe was refused */
} crossmod_tracepoint_refusal;
size_t crossmod_probes_tracepoint_refusals(crossmod_tracepoint_refusal* out, size_t capacity);
int crossmod_probes_exclude_from_tracepoints(const void* address);
void crossmod_probes_set_tracepoint_trap_fallback(int on);
int crossmod_probe_tracepoint_trap_mode(crossmod_probe_id id);
/* Inside an exit probe function: the TSC taken when the calling exit hook began (0 elsewhere). */
uint64_t crossmod_probe_exit_hook_tsc(void);

#ifdef __cplusplus
}
#endif
#endif /* CROSSMOD_PROBES_H */
