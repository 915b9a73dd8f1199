// The harness's name for the stress site, which lives in engine/testsupport so that the
// bench suites can use it without depending on the harness (see stress_site.hpp there).
#pragma once
#include "crossmod/testsupport/stress_site.hpp"

namespace crossmod::harness {
using testsupport::StressSite;
}  // namespace crossmod::harness
