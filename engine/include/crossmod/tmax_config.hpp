// Tmax configuration: the calibrated wait written by `crossmod calibrate` to
// configs/tmax/<slug>.toml, loaded by production users of the engine.
// Thread safety: thread-safe; not async-signal-safe (reads files, allocates).
#pragma once
#include <cstdint>
#include <string>

#include "crossmod/status.hpp"

namespace crossmod {

// The paper's production value (section 8), used only when no config exists, and always
// reported as a default.
inline constexpr std::uint64_t kDefaultTmaxTicks = 3000;
inline constexpr int kTmaxSchemaVersion = 1;

struct TmaxConfig {
  std::uint64_t recommended_ticks = kDefaultTmaxTicks;  // what wordpatch waits
  std::uint64_t observed_ticks = 0;                     // smallest W with no failures
  double recommended_ns = 0;
  double tsc_hz = 0;
  std::string machine;      // slug the config was calibrated on
  std::string margin_rule;  // how recommended was derived from observed
  std::string source;       // file path, or "built-in default"
  bool is_default = true;
};

struct ConfigError {
  std::string file;
  int line = 0;       // 1-based; 0 when unknown
  std::string field;  // dotted TOML key, e.g. "tmax.recommended_ticks"
  std::string message;
  std::string to_string() const;  // "file:line: field: message"
};

// Loads one file. not_found if it does not exist; parse_error (with *err filled) if it is
// malformed, misses a required field, has a wrong type, or a newer schema_version.
Status load_tmax_config(const std::string& path, TmaxConfig* out, ConfigError* err) noexcept;

// Resolution order: $CROSSMOD_TMAX_CONFIG (an error if set but unloadable);
// ./configs/tmax/<slug>.toml; <source dir>/configs/tmax/<slug>.toml; otherwise the
// built-in default (ok, out->is_default = true, out->source = "built-in default").
Status load_tmax_config_auto(TmaxConfig* out, ConfigError* err) noexcept;

}  // namespace crossmod
