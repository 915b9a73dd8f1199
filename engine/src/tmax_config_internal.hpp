// Engine-internal: the resolution step of load_tmax_config_auto with its inputs made
// explicit, so tests can exercise it without depending on the environment, the current
// directory or configs committed to the source tree. Thread safety: as tmax_config.hpp.
#pragma once
#include <string>
#include <vector>

#include "crossmod/tmax_config.hpp"

namespace crossmod::detail {

// `env_path`: the value of $CROSSMOD_TMAX_CONFIG or nullptr/"" when unset; `dirs`: the
// directories searched, in order, for `<slug>.toml`.
Status resolve_tmax_config(const char* env_path, const std::vector<std::string>& dirs,
                           const std::string& slug, TmaxConfig* out, ConfigError* err,
                           const TmaxLoadOptions& options = {}) noexcept;

}  // namespace crossmod::detail
