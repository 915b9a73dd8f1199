// The soak program's entry point, instrumented (soak_workload.cpp) and not (the reference
// copy in soak_main.cpp).
#pragma once
#include <cstdint>

namespace soakapp {
std::uint64_t process_document(std::uint64_t seed);
}  // namespace soakapp
