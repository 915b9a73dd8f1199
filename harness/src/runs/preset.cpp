// Sweep presets: TOML parsing with file:line errors, CLI overrides, validation, expansion.
// Thread safety: not thread-safe; not async-signal-safe.
#include "runs/preset.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "commands/commands.hpp"
#include "crossmod/x86.hpp"
#include "results/results_io.hpp"

namespace crossmod::harness {

unsigned max_aligned_offset() {
  return x86::cache_line_size() - static_cast<unsigned>(x86::kCallLen);
}

namespace {

// Error context for one TOML file.
struct Ctx {
  std::string file;
  [[noreturn]] void fail(const toml::node* n, const std::string& key, const std::string& msg) const {
    const int line = n ? static_cast<int>(n->source().begin.line) : 0;
    if (line > 0) throw UsageError(fmt::format("{}:{}: {}: {}", file, line, key, msg));
    throw UsageError(fmt::format("{}: {}: {}", file, key, msg));
  }
};

std::int64_t get_int(const Ctx& c, const toml::node& n, const std::string& key) {
  if (auto v = n.value_exact<std::int64_t>()) return *v;
  c.fail(&n, key, "expected an integer");
}

std::uint64_t get_nonneg(const Ctx& c, const toml::node& n, const std::string& key,
                         const char* what) {
  const std::int64_t v = get_int(c, n, key);
  if (v < 0) c.fail(&n, key, fmt::format("{} {} is negative", what, v));
  return static_cast<std::uint64_t>(v);
}

double get_number(const Ctx& c, const toml::node& n, const std::string& key) {
  if (auto v = n.value_exact<double>()) return *v;
  if (auto i = n.value_exact<std::int64_t>()) return static_cast<double>(*i);
  c.fail(&n, key, "expected a number");
}

std::string get_string(const Ctx& c, const toml::node& n, const std::string& key) {
  if (auto v = n.value_exact<std::string>()) return *v;
  c.fail(&n, key, "expected a string");
}

const toml::array& get_array(const Ctx& c, const toml::node& n, const std::string& key) {
  if (const auto* a = n.as_array()) {
    if (a->empty()) c.fail(&n, key, "must not be empty");
    return *a;
  }
  c.fail(&n, key, "expected an array");
}

Protocol protocol_or_fail(const std::string& name, const std::function<void(const std::string&)>& fail) {
  if (auto p = try_parse_protocol(name)) return *p;
  fail(fmt::format("unknown protocol '{}' (known: {})", name, protocol_names()));
  return Protocol::wordpatch;  // not reached
}

Placement placement_or_fail(const std::string& name, const std::function<void(const std::string&)>& fail) {
  if (auto p = placement_from_name(name)) return *p;
  fail(fmt::format("unknown placement '{}' (known: spread, smt, cross-package)", name));
  return Placement::spread;
}

std::vector<std::uint64_t> wait_range(std::uint64_t from, std::uint64_t to, std::uint64_t step,
                                      const std::function<void(const std::string&)>& fail) {
  if (step == 0) fail("range step must be > 0");
  if (to < from) fail(fmt::format("range end {} is below its start {}", to, from));
  if ((to - from) / step > 100000) fail("range has more than 100000 values");
  std::vector<std::uint64_t> v;
  for (std::uint64_t w = from; w <= to; w += step) v.push_back(w);
  return v;
}

void check_keys(const Ctx& c, const toml::table& t, const std::string& prefix,
                const std::set<std::string>& known) {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (!known.count(key)) c.fail(&v, prefix + key, "unknown key");
  }
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_commas(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) throw UsageError(fmt::format("{}: empty item in '{}'", what, text));
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::uint64_t parse_u64_text(const std::string& s, const std::string& what) {
  if (!s.empty() && s[0] == '-') throw UsageError(fmt::format("{}: '{}' is negative", what, s));
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError(fmt::format("{}: '{}' is not a non-negative integer", what, s));
  }
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) throw UsageError(fmt::format("{}: '{}' is too large", what, s));
  return v;
}

double parse_double_text(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v)) {
    throw UsageError(fmt::format("{}: '{}' is not a number", what, s));
  }
  return v;
}

template <class T>
std::string join(const std::vector<T>& v, const std::string& sep = ",") {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += fmt::format("{}", v[i]);
  }
  return out;
}

void parse_calibrate(const Ctx& c, const toml::table& t, CalibrateParams& p) {
  check_keys(c, t, "calibrate.",
             {"budget_s", "cell_s", "ladder", "max_wait_ticks", "resolution_ticks",
              "confirm_multipliers", "control_wait_ticks", "probe_toggles", "min_toggles",
              "max_toggles", "search_rounds", "min_active_rounds"});
  auto num = [&](const char* k, double& out) {
    if (const auto* n = t.get(k)) out = get_number(c, *n, std::string("calibrate.") + k);
  };
  auto u64 = [&](const char* k, std::uint64_t& out) {
    if (const auto* n = t.get(k)) out = get_nonneg(c, *n, std::string("calibrate.") + k, "value");
  };
  num("budget_s", p.budget_s);
  num("cell_s", p.cell_s);
  u64("max_wait_ticks", p.max_wait_ticks);
  u64("resolution_ticks", p.resolution_ticks);
  u64("control_wait_ticks", p.control_wait_ticks);
  u64("probe_toggles", p.probe_toggles);
  u64("min_toggles", p.min_toggles);
  u64("max_toggles", p.max_toggles);
  if (const auto* n = t.get("search_rounds")) {
    p.search_rounds = static_cast<unsigned>(get_nonneg(c, *n, "calibrate.search_rounds", "value"));
  }
  if (const auto* n = t.get("min_active_rounds")) {
    p.min_active_rounds =
        static_cast<unsigned>(get_nonneg(c, *n, "calibrate.min_active_rounds", "value"));
  }
  if (const auto* n = t.get("ladder")) {
    p.ladder.clear();
    for (const auto& e : get_array(c, *n, "calibrate.ladder")) {
      p.ladder.push_back(get_nonneg(c, e, "calibrate.ladder", "wait"));
    }
  }
  if (const auto* n = t.get("confirm_multipliers")) {
    p.confirm_multipliers.clear();
    for (const auto& e : get_array(c, *n, "calibrate.confirm_multipliers")) {
      const double m = get_number(c, e, "calibrate.confirm_multipliers");
      if (m < 1) c.fail(&e, "calibrate.confirm_multipliers", "multipliers must be >= 1");
      p.confirm_multipliers.push_back(m);
    }
  }
  const toml::node* root = nullptr;
  if (p.budget_s <= 0) c.fail(t.get("budget_s"), "calibrate.budget_s", "must be > 0");
  if (!(p.cell_s > 0)) c.fail(t.get("cell_s"), "calibrate.cell_s", "must be > 0");
  if (p.confirm_multipliers.empty()) {
    c.fail(t.get("confirm_multipliers"), "calibrate.confirm_multipliers", "needs at least one");
  }
  if (p.min_active_rounds == 0) {
    c.fail(t.get("min_active_rounds"), "calibrate.min_active_rounds", "must be >= 1");
  }
  if (p.resolution_ticks == 0) c.fail(t.get("resolution_ticks"), "calibrate.resolution_ticks", "must be > 0");
  if (p.min_toggles == 0 || p.probe_toggles == 0 || p.max_toggles < p.min_toggles) {
    c.fail(root, "calibrate", "need 0 < min_toggles <= max_toggles and probe_toggles > 0");
  }
  std::sort(p.ladder.begin(), p.ladder.end());
  p.ladder.erase(std::unique(p.ladder.begin(), p.ladder.end()), p.ladder.end());
}

}  // namespace

std::uint64_t SweepConfig::toggles_for(Protocol p) const {
  const auto it = protocol_toggles.find(p);
  return it == protocol_toggles.end() ? toggles : it->second;
}

std::vector<CellSpec> SweepConfig::expand(Phase phase) const {
  if (rounds > 0) {
    SweepConfig one = *this;
    one.rounds = 0;
    one.reps = 1;
    const std::vector<CellSpec> grid = one.expand(phase);
    std::vector<CellSpec> cells;
    for (unsigned r = 0; r < rounds; ++r) {
      std::vector<CellSpec> round = grid;
      for (auto& c : round) {
        c.rep = r;
        c.round = r;
      }
      std::mt19937_64 rng(0x5EEDULL + r);
      std::shuffle(round.begin(), round.end(), rng);
      cells.insert(cells.end(), round.begin(), round.end());
    }
    return cells;
  }
  std::vector<CellSpec> cells;
  for (unsigned rep = 0; rep < reps; ++rep) {
    for (Protocol p : protocols) {
      for (std::uint64_t w : waits) {
        // aligned is the single-store negative control: always inside a line, at each
        // offset; every other protocol runs at each straddle.
        std::vector<std::pair<unsigned, unsigned>> sites;  // (straddle, offset)
        if (info(p).in_one_line) {
          for (unsigned off : aligned_offsets) sites.emplace_back(0u, off);
        } else {
          for (unsigned s : straddles) sites.emplace_back(s, 0u);
        }
        for (const auto& [s, off] : sites) {
          for (unsigned n : executors) {
            for (Placement pl : placements) {
              CellSpec spec;
              spec.protocol = p;
              spec.wait_ticks = w;
              spec.straddle = s;
              spec.site_offset = off;
              spec.executors = n;
              spec.placement = pl;
              spec.rep = rep;
              spec.toggles = toggles_for(p);
              spec.dwell_ticks = dwell_ticks;
              spec.watchdog_s = watchdog_s;
              spec.max_failures = max_failures;
              spec.phase = phase;
              cells.push_back(spec);
            }
          }
        }
      }
    }
  }
  return cells;
}

std::string SweepConfig::config_key() const {
  std::vector<std::string> protos, places, ptog;
  for (Protocol p : protocols) protos.emplace_back(to_string(p));
  for (Placement p : placements) places.emplace_back(placement_name(p));
  for (const auto& [p, t] : protocol_toggles) ptog.push_back(fmt::format("{}={}", to_string(p), t));
  const auto& k = calibrate;
  return fmt::format(
      "v{};protocols={};waits={};straddles={};offsets={};executors={};placements={};reps={};{}"
      "toggles={};ptoggles={};dwell={};watchdog={};max_failures={};cal=rounds,budget:{},cell:{},"
      "ladder:{},max:{},res:{},mult:{},cw:{},probe:{},min:{},max:{},search:{},active:{}",
      kPresetSchemaVersion, join(protos), join(waits), join(straddles), join(aligned_offsets),
      join(executors), join(places), reps, rounds ? fmt::format("rounds={};", rounds) : std::string(), toggles, join(ptog), dwell_ticks, watchdog_s,
      max_failures, k.budget_s, k.cell_s, join(k.ladder), k.max_wait_ticks,
      k.resolution_ticks, join(k.confirm_multipliers), k.control_wait_ticks, k.probe_toggles,
      k.min_toggles, k.max_toggles, k.search_rounds, k.min_active_rounds);
}

std::string SweepConfig::to_json() const {
  std::vector<std::string> protos, places;
  for (Protocol p : protocols) protos.emplace_back(to_string(p));
  for (Placement p : placements) places.emplace_back(placement_name(p));
  JsonObject ptog;
  for (const auto& [p, t] : protocol_toggles) ptog.num(to_string(p), t);
  auto nums = [](const auto& v) {
    std::string out(1, '[');
    out += join(v, ", ");
    out += ']';
    return out;
  };
  JsonObject grid;
  grid.raw("protocols", json_array_of_strings(protos))
      .raw("waits", nums(waits))
      .raw("straddles", nums(straddles))
      .raw("aligned_offsets", nums(aligned_offsets))
      .raw("executors", nums(executors))
      .raw("placements", json_array_of_strings(places))
      .num("reps", static_cast<std::uint64_t>(reps))
      .num("toggles", toggles)
      .raw("protocol_toggles", ptog.render())
      .raw("dwell", dwell_ticks == 0 ? std::string("\"auto\"") : std::to_string(dwell_ticks))
      // What the cells do (CellSpec's default, which sweeps never change); sweeps before
      // 2026-11-27 fell through and recorded nothing.
      .str("site_entry", to_string(CellSpec{}.site_entry))
      .num("watchdog_s", watchdog_s)
      .num("max_failures", max_failures);
  const auto& k = calibrate;
  JsonObject cal;
  cal.num("budget_s", k.budget_s)
      .num("cell_s", k.cell_s)
      .raw("ladder", nums(k.ladder))
      .num("max_wait_ticks", k.max_wait_ticks)
      .num("resolution_ticks", k.resolution_ticks)
      .raw("confirm_multipliers", nums(k.confirm_multipliers))
      .num("control_wait_ticks", k.control_wait_ticks)
      .num("probe_toggles", k.probe_toggles)
      .num("min_toggles", k.min_toggles)
      .num("max_toggles", k.max_toggles)
      .num("search_rounds", static_cast<std::uint64_t>(k.search_rounds))
      .num("min_active_rounds", static_cast<std::uint64_t>(k.min_active_rounds));
  JsonObject o;
  o.num("schema_version", static_cast<std::int64_t>(kPresetSchemaVersion))
      .str("name", name)
      .str("description", description)
      .str("source", source)
      .raw("grid", grid.render())
      .raw("calibrate", cal.render());
  return o.render();
}

SweepConfig parse_preset(const std::string& text, const std::string& source_name) {
  Ctx c{source_name};
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw UsageError(fmt::format("{}:{}: malformed TOML: {}", source_name,
                                 e.source().begin.line, e.description()));
  }
  check_keys(c, root, "", {"schema_version", "name", "description", "grid", "calibrate"});
  SweepConfig cfg;
  cfg.source = source_name;
  const auto* sv = root.get("schema_version");
  if (!sv) c.fail(nullptr, "schema_version", "missing");
  const auto ver = get_int(c, *sv, "schema_version");
  if (ver != kPresetSchemaVersion) {
    c.fail(sv, "schema_version", fmt::format("unsupported version {} (this crossmod reads {})", ver, kPresetSchemaVersion));
  }
  if (const auto* n = root.get("name")) cfg.name = get_string(c, *n, "name");
  if (const auto* n = root.get("description")) cfg.description = get_string(c, *n, "description");
  const auto* grid_node = root.get("grid");
  if (!grid_node || !grid_node->is_table()) c.fail(grid_node, "grid", "missing [grid] table");
  const toml::table& g = *grid_node->as_table();
  check_keys(c, g, "grid.",
             {"protocols", "waits", "straddles", "aligned_offsets", "executors", "placements",
              "reps", "toggles", "protocol_toggles", "dwell", "watchdog_s", "max_failures"});
  auto require = [&](const char* key) -> const toml::node& {
    const auto* n = g.get(key);
    if (!n) c.fail(grid_node, std::string("grid.") + key, "missing");
    return *n;
  };

  {
    const auto& n = require("protocols");
    for (const auto& e : get_array(c, n, "grid.protocols")) {
      const std::string name = get_string(c, e, "grid.protocols");
      cfg.protocols.push_back(protocol_or_fail(name, [&](const std::string& m) { c.fail(&e, "grid.protocols", m); }));
    }
  }
  {
    const auto& n = require("waits");
    if (const auto* t = n.as_table()) {
      check_keys(c, *t, "grid.waits.", {"from", "to", "step"});
      auto field = [&](const char* k) {
        const auto* f = t->get(k);
        if (!f) c.fail(&n, std::string("grid.waits.") + k, "missing");
        return get_nonneg(c, *f, std::string("grid.waits.") + k, "wait");
      };
      cfg.waits = wait_range(field("from"), field("to"), field("step"),
                             [&](const std::string& m) { c.fail(&n, "grid.waits", m); });
    } else {
      for (const auto& e : get_array(c, n, "grid.waits")) cfg.waits.push_back(get_nonneg(c, e, "grid.waits", "wait"));
    }
  }
  {
    const auto& n = require("straddles");
    for (const auto& e : get_array(c, n, "grid.straddles")) {
      const auto s = get_int(c, e, "grid.straddles");
      if (s < 0 || s > 4) c.fail(&e, "grid.straddles", fmt::format("straddle {} is outside 0..4", s));
      cfg.straddles.push_back(static_cast<unsigned>(s));
    }
  }
  if (const auto* n = g.get("aligned_offsets")) {
    cfg.aligned_offsets.clear();
    for (const auto& e : get_array(c, *n, "grid.aligned_offsets")) {
      const auto o = get_int(c, e, "grid.aligned_offsets");
      if (o < 0 || o > max_aligned_offset()) {
        c.fail(&e, "grid.aligned_offsets", fmt::format("offset {} is outside 0..{} (the 5-byte site must fit in a {}-byte line)", o, max_aligned_offset(), x86::cache_line_size()));
      }
      cfg.aligned_offsets.push_back(static_cast<unsigned>(o));
    }
  }
  if (const auto* n = g.get("executors")) {
    cfg.executors.clear();
    for (const auto& e : get_array(c, *n, "grid.executors")) {
      const auto x = get_int(c, e, "grid.executors");
      if (x < 1) c.fail(&e, "grid.executors", fmt::format("executor count {} must be >= 1", x));
      if (x > 1024) c.fail(&e, "grid.executors", fmt::format("executor count {} is absurd", x));
      cfg.executors.push_back(static_cast<unsigned>(x));
    }
  }
  if (const auto* n = g.get("placements")) {
    cfg.placements.clear();
    for (const auto& e : get_array(c, *n, "grid.placements")) {
      const std::string name = get_string(c, e, "grid.placements");
      cfg.placements.push_back(placement_or_fail(name, [&](const std::string& m) { c.fail(&e, "grid.placements", m); }));
    }
  }
  if (const auto* n = g.get("reps")) {
    const auto r = get_int(c, *n, "grid.reps");
    if (r < 1 || r > 1000000) c.fail(n, "grid.reps", fmt::format("reps {} must be >= 1", r));
    cfg.reps = static_cast<unsigned>(r);
  }
  {
    const auto& n = require("toggles");
    cfg.toggles = get_nonneg(c, n, "grid.toggles", "toggles");
    if (cfg.toggles == 0) c.fail(&n, "grid.toggles", "must be >= 1");
  }
  if (const auto* n = g.get("protocol_toggles")) {
    const auto* t = n->as_table();
    if (!t) c.fail(n, "grid.protocol_toggles", "expected a table");
    for (const auto& [k, v] : *t) {
      const std::string key = "grid.protocol_toggles." + std::string(k.str());
      const Protocol p = protocol_or_fail(std::string(k.str()), [&](const std::string& m) { c.fail(&v, key, m); });
      const auto x = get_nonneg(c, v, key, "toggles");
      if (x == 0) c.fail(&v, key, "must be >= 1");
      cfg.protocol_toggles[p] = x;
    }
  }
  if (const auto* n = g.get("dwell")) {
    if (auto s = n->value_exact<std::string>()) {
      if (*s != "auto") c.fail(n, "grid.dwell", fmt::format("expected \"auto\" or ticks, got \"{}\"", *s));
      cfg.dwell_ticks = 0;
    } else {
      cfg.dwell_ticks = get_nonneg(c, *n, "grid.dwell", "dwell");
    }
  }
  if (const auto* n = g.get("watchdog_s")) {
    cfg.watchdog_s = get_number(c, *n, "grid.watchdog_s");
    if (cfg.watchdog_s <= 0) c.fail(n, "grid.watchdog_s", "must be > 0");
  }
  if (const auto* n = g.get("max_failures")) {
    cfg.max_failures = get_nonneg(c, *n, "grid.max_failures", "max_failures");
    if (cfg.max_failures == 0) c.fail(n, "grid.max_failures", "must be >= 1");
  }
  if (const auto* n = root.get("calibrate")) {
    const auto* t = n->as_table();
    if (!t) c.fail(n, "calibrate", "expected a table");
    parse_calibrate(c, *t, cfg.calibrate);
  }
  validate(cfg);
  return cfg;
}

SweepConfig load_preset_file(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
  return parse_preset(text, path);
}

std::string find_preset(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
    throw UsageError(fmt::format("bad preset name '{}' (use --config FILE for a path)", name));
  }
  const std::string local = "configs/sweep/" + name + ".toml";
  const std::string source = std::string(CROSSMOD_SOURCE_DIR) + "/" + local;
  std::error_code ec;
  if (std::filesystem::is_regular_file(local, ec)) return local;
  if (std::filesystem::is_regular_file(source, ec)) return source;
  throw UsageError(fmt::format("unknown preset '{}': neither ./{} nor {} exists", name, local, source));
}

std::vector<std::uint64_t> parse_wait_list(const std::string& text, const std::string& what) {
  std::vector<std::uint64_t> out;
  for (const auto& item : split_commas(text, what)) {
    if (item.find(':') != std::string::npos) {
      // from:to:step
      std::vector<std::string> parts;
      std::stringstream ss(item);
      std::string p;
      while (std::getline(ss, p, ':')) parts.push_back(trim(p));
      if (parts.size() != 3) throw UsageError(fmt::format("{}: range '{}' must be from:to:step", what, item));
      const auto r = wait_range(parse_u64_text(parts[0], what), parse_u64_text(parts[1], what),
                                parse_u64_text(parts[2], what),
                                [&](const std::string& m) { throw UsageError(fmt::format("{}: {}", what, m)); });
      out.insert(out.end(), r.begin(), r.end());
    } else {
      out.push_back(parse_u64_text(item, what));
    }
  }
  return out;
}

std::vector<unsigned> parse_unsigned_list(const std::string& text, const std::string& what) {
  std::vector<unsigned> out;
  for (const auto& item : split_commas(text, what)) {
    const auto v = parse_u64_text(item, what);
    if (v > 1000000) throw UsageError(fmt::format("{}: '{}' is too large", what, item));
    out.push_back(static_cast<unsigned>(v));
  }
  return out;
}

void apply_overrides(SweepConfig& cfg, const Overrides& ov) {
  auto fail = [](const std::string& what) {
    return [what](const std::string& m) { throw UsageError(fmt::format("{}: {}", what, m)); };
  };
  if (ov.protocols) {
    cfg.protocols.clear();
    for (const auto& n : split_commas(*ov.protocols, "--protocols")) {
      cfg.protocols.push_back(protocol_or_fail(n, fail("--protocols")));
    }
  }
  if (ov.waits) cfg.waits = parse_wait_list(*ov.waits, "--waits");
  if (ov.straddles) {
    cfg.straddles = parse_unsigned_list(*ov.straddles, "--straddles");
    for (unsigned s : cfg.straddles) {
      if (s > 4) throw UsageError(fmt::format("--straddles: straddle {} is outside 0..4", s));
    }
  }
  if (ov.aligned_offsets) cfg.aligned_offsets = parse_unsigned_list(*ov.aligned_offsets, "--aligned-offsets");
  if (ov.executors) cfg.executors = parse_unsigned_list(*ov.executors, "--executors");
  if (ov.placements) {
    cfg.placements.clear();
    for (const auto& n : split_commas(*ov.placements, "--placements")) {
      cfg.placements.push_back(placement_or_fail(n, fail("--placements")));
    }
  }
  if (ov.reps) cfg.reps = static_cast<unsigned>(parse_u64_text(trim(*ov.reps), "--reps"));
  if (ov.toggles) {
    cfg.toggles = parse_u64_text(trim(*ov.toggles), "--toggles");
    cfg.protocol_toggles.clear();  // an explicit count applies to every protocol
  }
  if (ov.dwell) {
    const std::string d = trim(*ov.dwell);
    cfg.dwell_ticks = d == "auto" ? 0 : parse_u64_text(d, "--dwell");
  }
  if (ov.watchdog) cfg.watchdog_s = parse_double_text(trim(*ov.watchdog), "--watchdog");
  if (ov.max_failures) cfg.max_failures = parse_u64_text(trim(*ov.max_failures), "--max-failures");
  validate(cfg);
}

void validate(const SweepConfig& cfg) {
  if (cfg.protocols.empty()) throw UsageError("no protocols to run");
  if (cfg.waits.empty()) throw UsageError("no waits to run");
  if (cfg.straddles.empty()) throw UsageError("no straddles to run");
  for (unsigned s : cfg.straddles) {
    if (s > 4) throw UsageError(fmt::format("straddle {} is outside 0..4", s));
  }
  for (unsigned o : cfg.aligned_offsets) {
    if (o > max_aligned_offset()) {
      throw UsageError(fmt::format("aligned offset {} is outside 0..{}", o, max_aligned_offset()));
    }
  }
  if (cfg.aligned_offsets.empty() &&
      std::any_of(cfg.protocols.begin(), cfg.protocols.end(), [](Protocol p) { return info(p).in_one_line; })) {
    throw UsageError("protocol aligned needs at least one aligned offset");
  }
  if (cfg.executors.empty()) throw UsageError("no executor counts to run");
  for (unsigned n : cfg.executors) {
    if (n == 0) throw UsageError("executor count 0: every cell needs at least one executor");
  }
  if (cfg.placements.empty()) throw UsageError("no placements to run");
  if (cfg.reps == 0) throw UsageError("reps must be >= 1");
  if (cfg.toggles == 0) throw UsageError("toggles must be >= 1");
  if (!(cfg.watchdog_s > 0)) throw UsageError("watchdog must be > 0 seconds");
  if (cfg.max_failures == 0) throw UsageError("max-failures must be >= 1");
}

}  // namespace crossmod::harness
