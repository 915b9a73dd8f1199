// The calibration site of libcrossmod_profile.so: one function compiled with
// -fpatchable-function-entry=5, so the probe scan gives it a real entry probe and an exit
// probe like any profiled function. runtime.cpp times calls of it with its probes off and
// on (with an empty probe function) to get the fixed cost of an active probe hit, which
// the budget policy adds to the time measured inside the probe functions.
// Thread safety: called only from the runtime's constructor.
#include "runtime_internal.hpp"

extern "C" __attribute__((noipa, visibility("hidden"))) void crossmod_profile_calib_target(
    volatile unsigned* counter) {
  *counter = *counter + 1;
}
