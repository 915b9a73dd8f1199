// The instrumented copy of the soak program (built with one provider's flags).
#include "soak_deps.hpp"
#include "soak_workload.hpp"

namespace soakapp {
#include "soak_program.inc"
}  // namespace soakapp
