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
// Version 2 added the top-level `verdict` key; version 1 files are still read (as legacy).
inline constexpr int kTmaxSchemaVersion = 2;

// What calibrate concluded about this machine. In configs/tmax/<slug>.toml it is the
// top-level string key `verdict` (before any table), required from schema_version = 2 on
// and not allowed in version 1:
//   verdict = "bounded"          Tmax with its bound, evidence from active rounds
//   verdict = "not-established"  the run never saw the machine in its tearing state
//   verdict = "unbounded"        tears up to the largest tested wait; use callpatch or
//                                sync-core
// "bounded" and version 1 files must have [tmax] recommended_ticks, observed_ticks and
// tsc_hz. "not-established" and "unbounded" files may omit recommended_ticks (then
// recommended_ticks is 0: no Tmax to hand out); if they give it, the rest is required too.
enum class TmaxVerdict : std::uint8_t {
  bounded,
  not_established,
  unbounded,
  legacy,            // a schema_version 1 file: written before calibrate gave verdicts
  built_in_default,  // no file: the paper's value, never verified on this machine
};

// "bounded", "not-established", "unbounded" (the TOML spellings), "legacy",
// "built-in-default". Async-signal-safe (returns a literal).
const char* to_string(TmaxVerdict v) noexcept;

struct TmaxConfig {
  std::uint64_t recommended_ticks = kDefaultTmaxTicks;  // what wordpatch waits; 0: none
  std::uint64_t observed_ticks = 0;                     // smallest W with no failures
  double recommended_ns = 0;
  double tsc_hz = 0;
  std::string machine;      // slug the config was calibrated on
  std::string margin_rule;  // how recommended was derived from observed
  std::string source;       // file path, or "built-in default"
  bool is_default = true;
  TmaxVerdict verdict = TmaxVerdict::built_in_default;
};

// By default the engine hands out only a Tmax whose verdict is "bounded". Anything else
// (legacy, not-established, unbounded, the built-in default) is refused with
// Status::unverified, *out filled and *err saying why, unless the caller opts in.
struct TmaxLoadOptions {
  bool allow_unverified = false;  // accept any verdict that comes with a Tmax (ok)
};

struct ConfigError {
  std::string file;
  int line = 0;       // 1-based; 0 when unknown
  std::string field;  // dotted TOML key, e.g. "tmax.recommended_ticks"
  std::string message;
  std::string to_string() const;  // "file:line: field: message"
};

// Loads one file. not_found if it does not exist; parse_error (with *err filled, *out
// untouched) if it is malformed, misses a required field, has a wrong type, an unknown
// verdict or a newer schema_version; unverified (with *out and *err filled) if its verdict
// is not "bounded" and options.allow_unverified is false, or if it holds no Tmax at all.
Status load_tmax_config(const std::string& path, TmaxConfig* out, ConfigError* err,
                        const TmaxLoadOptions& options = {}) noexcept;

// Resolution order: $CROSSMOD_TMAX_CONFIG (an error if set but unloadable);
// ./configs/tmax/<slug>.toml; <source dir>/configs/tmax/<slug>.toml; otherwise the
// built-in default (out->is_default = true, out->source = "built-in default",
// out->verdict = built_in_default), which is unverified unless options allow it. A file
// found and refused is reported, never replaced by a later one or the default.
Status load_tmax_config_auto(TmaxConfig* out, ConfigError* err,
                             const TmaxLoadOptions& options = {}) noexcept;

}  // namespace crossmod
