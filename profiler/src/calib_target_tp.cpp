// The runtime's third calibration site: the same function as calib_target.cpp, compiled
// without any instrumentation flag, so that with --trace the runtime puts one of the
// tracepoint provider's probes on it (attach_tracepoints on this library, the only function
// of it ever traced) and measures the bias of a tracepoint probe pair (jump, trampoline,
// return-address redirection). Its entry is relocatable: a load, an add, a store.
// Thread safety: called only from the runtime's constructor.
#include "runtime_internal.hpp"

extern "C" __attribute__((noipa, visibility("hidden"))) void crossmod_profile_calib_target_tp(
    volatile unsigned* counter) {
  *counter = *counter + 1;
}
