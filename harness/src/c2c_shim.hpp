// Transitional: measure_c2c_for now lives in c2c.hpp. Only calibrate_cmd.cpp still
// includes this name; delete this file when it includes c2c.hpp instead.
#pragma once
#include "c2c.hpp"
