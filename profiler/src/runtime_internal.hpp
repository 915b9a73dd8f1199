// Shared between the runtime's translation units. Not a public interface.
#pragma once
extern "C" void crossmod_profile_calib_target(volatile unsigned* counter);
