// The runtime's second calibration site: the same function as calib_target.cpp, compiled
// with -finstrument-functions, so that the bias of a -finstrument-functions probe pair is
// measured on a cyg probe (its hooks and shadow stack cost more than a patchable sled's).
// Thread safety: called only from the runtime's constructor.
#include "runtime_internal.hpp"

extern "C" __attribute__((noipa, visibility("hidden"))) void crossmod_profile_calib_target_cyg(
    volatile unsigned* counter) {
  *counter = *counter + 1;
}
