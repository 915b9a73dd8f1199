// Loading configs/tmax/<slug>.toml (written by `crossmod calibrate`) with errors that name
// file, line and field. Thread safety: thread-safe (no shared state); allocates and reads
// files; not async-signal-safe. toml++ may throw: every call is wrapped, nothing escapes.
#include "crossmod/tmax_config.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <toml++/toml.h>

#include "crossmod/machine.hpp"
#include "tmax_config_internal.hpp"

namespace crossmod {

namespace {

int line_of(const toml::node* n) noexcept {
  return n != nullptr ? static_cast<int>(n->source().begin.line) : 0;
}

Status fail(ConfigError* err, const std::string& file, int line, const std::string& field,
            const std::string& message) {
  if (err != nullptr) *err = ConfigError{file, line, field, message};
  return Status::parse_error;
}

// Looks up `table.key`; on a missing table or key reports the line of the table header
// (0 for a missing table).
struct Lookup {
  const toml::node* node = nullptr;
  int line = 0;
};

Lookup lookup(const toml::table& root, const char* table, const char* key) {
  const toml::node* t = root.get(table);
  if (t == nullptr || !t->is_table()) return {nullptr, line_of(t)};
  return {t->as_table()->get(key), line_of(t)};
}

bool parse_verdict(const std::string& s, TmaxVerdict* v) {
  for (TmaxVerdict c :
       {TmaxVerdict::bounded, TmaxVerdict::not_established, TmaxVerdict::unbounded}) {
    if (s == to_string(c)) {
      *v = c;
      return true;
    }
  }
  return false;
}

// `verdict_line`: where the verdict key is (0 when absent), for the refusal message.
Status load(const std::string& path, TmaxConfig* out, ConfigError* err, int* verdict_line) {
  std::error_code fec;
  if (!std::filesystem::is_regular_file(path, fec)) {
    if (err != nullptr) *err = ConfigError{path, 0, "", "file not found"};
    return Status::not_found;
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return fail(err, path, static_cast<int>(e.source().begin.line), "",
                std::string(e.description()));
  }

  // schema_version: required integer, not newer than this engine understands.
  const toml::node* sv = root.get("schema_version");
  if (sv == nullptr) return fail(err, path, 0, "schema_version", "missing required field");
  const auto version = sv->value<std::int64_t>();
  if (!sv->is_integer() || !version)
    return fail(err, path, line_of(sv), "schema_version", "must be an integer");
  if (*version > kTmaxSchemaVersion || *version < 1)
    return fail(err, path, line_of(sv), "schema_version",
                "unsupported schema_version " + std::to_string(*version) + " (this engine reads " +
                    std::to_string(kTmaxSchemaVersion) + ")");

  // verdict: required from version 2 on; a version 1 file predates it (legacy), and a
  // verdict in one would be a hand edit that skipped the rest of version 2.
  TmaxConfig cfg;
  cfg.verdict = TmaxVerdict::legacy;
  const toml::node* vn = root.get("verdict");
  *verdict_line = line_of(vn);
  if (*version == 1) {
    if (vn != nullptr)
      return fail(err, path, line_of(vn), "verdict",
                  "not part of schema_version 1 (a file with a verdict is schema_version 2)");
  } else {
    if (vn == nullptr) return fail(err, path, 0, "verdict", "missing required field");
    if (!vn->is_string()) return fail(err, path, line_of(vn), "verdict", "must be a string");
    const std::string v = *vn->value<std::string>();
    if (!parse_verdict(v, &cfg.verdict))
      return fail(err, path, line_of(vn), "verdict",
                  "unknown verdict \"" + v +
                      "\" (expected \"bounded\", \"not-established\" or \"unbounded\")");
  }
  // Only a verdict that vouches for a Tmax must carry one; "unbounded" and
  // "not-established" files may have no [tmax] numbers at all.
  const bool needs_tmax = cfg.verdict == TmaxVerdict::bounded ||
                          cfg.verdict == TmaxVerdict::legacy ||
                          lookup(root, "tmax", "recommended_ticks").node != nullptr;

  auto require_int = [&](const char* table, const char* key, std::uint64_t* dst,
                         bool positive) -> Status {
    const std::string field = std::string(table) + "." + key;
    const Lookup l = lookup(root, table, key);
    if (l.node == nullptr)
      return needs_tmax ? fail(err, path, l.line, field, "missing required field") : Status::ok;
    if (!l.node->is_integer()) return fail(err, path, line_of(l.node), field, "must be an integer");
    const std::int64_t v = *l.node->value<std::int64_t>();
    if (v < 0 || (positive && v == 0))
      return fail(err, path, line_of(l.node), field,
                  positive ? "must be a positive integer" : "must not be negative");
    *dst = static_cast<std::uint64_t>(v);
    return Status::ok;
  };
  auto number = [&](const char* table, const char* key, double* dst, bool required,
                    bool positive) -> Status {
    const std::string field = std::string(table) + "." + key;
    const Lookup l = lookup(root, table, key);
    if (l.node == nullptr)
      return required ? fail(err, path, l.line, field, "missing required field") : Status::ok;
    if (!l.node->is_number()) return fail(err, path, line_of(l.node), field, "must be a number");
    const double v = *l.node->value<double>();
    if (!(v >= 0) || (positive && v == 0))
      return fail(err, path, line_of(l.node), field,
                  positive ? "must be a positive number" : "must not be negative");
    *dst = v;
    return Status::ok;
  };
  auto string = [&](const char* table, const char* key, std::string* dst,
                    bool required) -> Status {
    const std::string field = std::string(table) + "." + key;
    const Lookup l = lookup(root, table, key);
    if (l.node == nullptr)
      return required ? fail(err, path, l.line, field, "missing required field") : Status::ok;
    if (!l.node->is_string()) return fail(err, path, line_of(l.node), field, "must be a string");
    *dst = *l.node->value<std::string>();
    return Status::ok;
  };

  if (Status s = string("machine", "slug", &cfg.machine, true); s != Status::ok) return s;
  if (cfg.machine.empty())
    return fail(err, path, line_of(lookup(root, "machine", "slug").node), "machine.slug",
                "must not be empty");
  if (!needs_tmax) cfg.recommended_ticks = 0;
  if (Status s = require_int("tmax", "recommended_ticks", &cfg.recommended_ticks, true);
      s != Status::ok)
    return s;
  if (Status s = require_int("tmax", "observed_ticks", &cfg.observed_ticks, false);
      s != Status::ok)
    return s;
  if (Status s = number("tmax", "tsc_hz", &cfg.tsc_hz, needs_tmax, true); s != Status::ok)
    return s;
  if (cfg.tsc_hz > 0)
    cfg.recommended_ns = static_cast<double>(cfg.recommended_ticks) * 1e9 / cfg.tsc_hz;
  if (Status s = number("tmax", "recommended_ns", &cfg.recommended_ns, false, false);
      s != Status::ok)
    return s;
  double observed_ns = 0;  // validated for type; not part of TmaxConfig
  if (Status s = number("tmax", "observed_ns", &observed_ns, false, false); s != Status::ok)
    return s;
  if (Status s = string("tmax", "margin_rule", &cfg.margin_rule, false); s != Status::ok) return s;

  cfg.source = path;
  cfg.is_default = false;
  *out = std::move(cfg);
  return Status::ok;
}

TmaxConfig default_config() {
  TmaxConfig cfg;
  cfg.recommended_ticks = kDefaultTmaxTicks;
  cfg.source = "built-in default";
  cfg.margin_rule = "paper default (PLDI'16 section 8), not calibrated on this machine";
  cfg.is_default = true;
  cfg.verdict = TmaxVerdict::built_in_default;
  return cfg;
}

// The gate between a loaded config and the caller: only a "bounded" Tmax is handed out
// unless the caller opted in, and never a config that holds no Tmax.
Status check_verdict(const TmaxConfig& cfg, const TmaxLoadOptions& options, int line,
                     ConfigError* err) {
  std::string why;
  if (cfg.recommended_ticks == 0) {
    why = std::string("verdict \"") + to_string(cfg.verdict) +
          "\" and no [tmax] recommended_ticks: there is no wordpatch Tmax to use";
  } else if (cfg.verdict == TmaxVerdict::bounded || options.allow_unverified) {
    return Status::ok;
  } else {
    switch (cfg.verdict) {
      case TmaxVerdict::legacy:
        why = "schema_version 1 file, no verdict (legacy): its Tmax was never checked against "
              "bursts of tears; rerun `crossmod calibrate`";
        break;
      case TmaxVerdict::not_established:
        why = "verdict \"not-established\": calibrate never saw this machine in its tearing "
              "state; run it longer";
        break;
      case TmaxVerdict::unbounded:
        why = "verdict \"unbounded\": tears up to the largest tested wait; use callpatch or "
              "sync-core";
        break;
      case TmaxVerdict::built_in_default:
        why = "no calibrated Tmax for this machine, and the built-in default was never "
              "verified on it; run `crossmod calibrate`";
        break;
      case TmaxVerdict::bounded:
        break;
    }
    why += "; or opt in with TmaxLoadOptions::allow_unverified";
  }
  if (err != nullptr) *err = ConfigError{cfg.source, line, "verdict", why};
  return Status::unverified;
}

}  // namespace

const char* to_string(TmaxVerdict v) noexcept {
  switch (v) {
    case TmaxVerdict::bounded: return "bounded";
    case TmaxVerdict::not_established: return "not-established";
    case TmaxVerdict::unbounded: return "unbounded";
    case TmaxVerdict::legacy: return "legacy";
    case TmaxVerdict::built_in_default: return "built-in-default";
  }
  return "unknown";
}

std::string ConfigError::to_string() const {
  std::string s = file + ":" + std::to_string(line) + ": ";
  if (!field.empty()) s += field + ": ";
  return s + message;
}

Status load_tmax_config(const std::string& path, TmaxConfig* out, ConfigError* err,
                        const TmaxLoadOptions& options) noexcept {
  if (out == nullptr) return Status::bad_address;
  try {
    int verdict_line = 0;
    const Status s = load(path, out, err, &verdict_line);
    if (s != Status::ok) return s;
    return check_verdict(*out, options, verdict_line, err);
  } catch (const std::exception& e) {
    try {
      if (err != nullptr) *err = ConfigError{path, 0, "", e.what()};
    } catch (...) {
    }
    return Status::parse_error;
  } catch (...) {
    return Status::parse_error;
  }
}

namespace detail {

Status resolve_tmax_config(const char* env_path, const std::vector<std::string>& dirs,
                           const std::string& slug, TmaxConfig* out, ConfigError* err,
                           const TmaxLoadOptions& options) noexcept {
  if (out == nullptr) return Status::bad_address;
  try {
    if (env_path != nullptr && env_path[0] != '\0') {
      // Named explicitly: any failure, including a missing file, is the caller's error.
      const Status s = load_tmax_config(env_path, out, err, options);
      if (s == Status::not_found && err != nullptr)
        err->message = "file named by CROSSMOD_TMAX_CONFIG not found";
      return s;
    }
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + slug + ".toml";
      const Status s = load_tmax_config(path, out, err, options);
      // A file that exists but is broken or refused is reported, never silently replaced
      // by the default.
      if (s != Status::not_found) return s;
    }
    *out = default_config();
    if (err != nullptr) *err = ConfigError{};
    return check_verdict(*out, options, 0, err);
  } catch (...) {
    return Status::parse_error;
  }
}

}  // namespace detail

Status load_tmax_config_auto(TmaxConfig* out, ConfigError* err,
                             const TmaxLoadOptions& options) noexcept {
  try {
    std::vector<std::string> dirs{"configs/tmax"};
#ifdef CROSSMOD_SOURCE_DIR
    dirs.emplace_back(std::string(CROSSMOD_SOURCE_DIR) + "/configs/tmax");
#endif
    return detail::resolve_tmax_config(std::getenv("CROSSMOD_TMAX_CONFIG"), dirs,
                                       machine_slug(), out, err, options);
  } catch (...) {
    return Status::parse_error;
  }
}

}  // namespace crossmod
