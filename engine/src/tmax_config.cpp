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

Status load(const std::string& path, TmaxConfig* out, ConfigError* err) {
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

  TmaxConfig cfg;
  auto require_int = [&](const char* table, const char* key, std::uint64_t* dst,
                         bool positive) -> Status {
    const std::string field = std::string(table) + "." + key;
    const Lookup l = lookup(root, table, key);
    if (l.node == nullptr) return fail(err, path, l.line, field, "missing required field");
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
  if (Status s = require_int("tmax", "recommended_ticks", &cfg.recommended_ticks, true);
      s != Status::ok)
    return s;
  if (Status s = require_int("tmax", "observed_ticks", &cfg.observed_ticks, false);
      s != Status::ok)
    return s;
  if (Status s = number("tmax", "tsc_hz", &cfg.tsc_hz, true, true); s != Status::ok) return s;
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
  return cfg;
}

}  // namespace

std::string ConfigError::to_string() const {
  std::string s = file + ":" + std::to_string(line) + ": ";
  if (!field.empty()) s += field + ": ";
  return s + message;
}

Status load_tmax_config(const std::string& path, TmaxConfig* out, ConfigError* err) noexcept {
  if (out == nullptr) return Status::bad_address;
  try {
    return load(path, out, err);
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
                           const std::string& slug, TmaxConfig* out, ConfigError* err) noexcept {
  if (out == nullptr) return Status::bad_address;
  try {
    if (env_path != nullptr && env_path[0] != '\0') {
      // Named explicitly: any failure, including a missing file, is the caller's error.
      const Status s = load_tmax_config(env_path, out, err);
      if (s == Status::not_found && err != nullptr)
        err->message = "file named by CROSSMOD_TMAX_CONFIG not found";
      return s;
    }
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + slug + ".toml";
      const Status s = load_tmax_config(path, out, err);
      // A file that exists but is broken is reported, never silently replaced by the default.
      if (s != Status::not_found) return s;
    }
    *out = default_config();
    if (err != nullptr) *err = ConfigError{};
    return Status::ok;
  } catch (...) {
    return Status::parse_error;
  }
}

}  // namespace detail

Status load_tmax_config_auto(TmaxConfig* out, ConfigError* err) noexcept {
  try {
    std::vector<std::string> dirs{"configs/tmax"};
#ifdef CROSSMOD_SOURCE_DIR
    dirs.emplace_back(std::string(CROSSMOD_SOURCE_DIR) + "/configs/tmax");
#endif
    return detail::resolve_tmax_config(std::getenv("CROSSMOD_TMAX_CONFIG"), dirs,
                                       machine_slug(), out, err);
  } catch (...) {
    return Status::parse_error;
  }
}

}  // namespace crossmod
