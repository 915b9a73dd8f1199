// See c2c_shim.hpp.
#include "c2c_shim.hpp"

namespace crossmod::harness {

C2cResult measure_c2c_for(const Topology&, Placement, unsigned) {
  // Until the c2c module lands: not measured; the 100-tick floor of the margin rule holds.
  return {0, "core-to-core latency not measured (c2c module not available in this build)"};
}

}  // namespace crossmod::harness
