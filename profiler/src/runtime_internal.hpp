// Shared between the runtime's translation units. Not a public interface.
#pragma once
extern "C" void crossmod_profile_calib_target(volatile unsigned* counter);      // patchable entry
extern "C" void crossmod_profile_calib_target_cyg(volatile unsigned* counter);  // -finstrument-functions
extern "C" void crossmod_profile_calib_target_tp(volatile unsigned* counter);   // none: a tracepoint
