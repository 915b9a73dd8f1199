// Metric description files: a small declarative format in TOML (after Paradyn's MDL: what
// to measure, per what, over which focus). Strict: unknown keys, bad values and duplicate
// names are errors, so a typo never silently measures something else.
//   [[metric]]
//   name = "calls"            # required, unique over all files
//   kind = "count"            # count | latency | histogram
//   per = "function"          # function | thread | total
//   description = "..."       # optional
//   [metric.focus]            # optional; fnmatch(3) patterns, default "*"
//   functions = "work_*"      # demangled name   (per = function | total)
//   object = "*/libfoo.so*"   # object path      (per = function | total)
//   thread = "*"              # decimal thread id (per = thread)
// Thread safety: single-threaded (the launcher).
#include <fmt/core.h>

#include <set>
#include <toml++/toml.h>

#include "crossmod/profile_report.hpp"

namespace crossmod::profile {
namespace {

bool get_string(const toml::table& t, const char* key, std::string* out, std::string* err, const std::string& where) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return true;
  const auto* s = n->as_string();
  if (s == nullptr) {
    *err = fmt::format("{}: '{}' must be a string", where, key);
    return false;
  }
  *out = s->get();
  return true;
}

bool only_keys(const toml::table& t, std::initializer_list<const char*> keys, std::string* err,
               const std::string& where) {
  for (const auto& [k, v] : t) {
    bool ok = false;
    for (const char* want : keys) ok = ok || k.str() == want;
    if (!ok) {
      *err = fmt::format("{}: unknown key '{}'", where, k.str());
      return false;
    }
  }
  return true;
}

}  // namespace

bool load_metrics(const std::string& path, std::vector<MetricSpec>* out, std::string* err) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto line = e.source().begin.line;
    std::string what(e.description());
    *err = fmt::format("metrics {}:{}: {}", path, line, what);
    return false;
  }
  std::set<std::string> names;
  for (const MetricSpec& m : *out) names.insert(m.name);
  const std::string file_where = fmt::format("metrics {}", path);
  if (!only_keys(doc, {"metric"}, err, file_where)) return false;
  const toml::array* arr = doc["metric"].as_array();
  if (arr == nullptr || arr->empty()) {
    *err = fmt::format("{}: no [[metric]] table", file_where);
    return false;
  }
  std::size_t i = 0;
  for (const toml::node& node : *arr) {
    ++i;
    const std::string where = fmt::format("{}: metric {}", file_where, i);
    const toml::table* t = node.as_table();
    if (t == nullptr) {
      *err = fmt::format("{}: must be a table ([[metric]])", where);
      return false;
    }
    if (!only_keys(*t, {"name", "kind", "per", "description", "focus"}, err, where)) return false;
    MetricSpec m;
    m.file = path;
    if (!get_string(*t, "name", &m.name, err, where) || !get_string(*t, "kind", &m.kind, err, where) ||
        !get_string(*t, "per", &m.per, err, where) || !get_string(*t, "description", &m.description, err, where))
      return false;
    if (m.name.empty()) {
      *err = fmt::format("{}: 'name' is required", where);
      return false;
    }
    if (m.kind != "count" && m.kind != "latency" && m.kind != "histogram") {
      *err = fmt::format("{} ({}): kind '{}' is not count|latency|histogram", where, m.name, m.kind);
      return false;
    }
    if (m.per != "function" && m.per != "thread" && m.per != "total") {
      *err = fmt::format("{} ({}): per '{}' is not function|thread|total", where, m.name, m.per);
      return false;
    }
    if (const toml::node* f = t->get("focus")) {
      const toml::table* ft = f->as_table();
      if (ft == nullptr) {
        *err = fmt::format("{} ({}): 'focus' must be a table", where, m.name);
        return false;
      }
      const std::string fw = fmt::format("{} ({}) focus", where, m.name);
      if (!only_keys(*ft, {"functions", "object", "thread"}, err, fw) ||
          !get_string(*ft, "functions", &m.functions, err, fw) || !get_string(*ft, "object", &m.object, err, fw) ||
          !get_string(*ft, "thread", &m.thread, err, fw))
        return false;
    }
    // Per-thread records hold totals over the profiled functions; they cannot be split by
    // function or object, and a per-function record cannot be split by thread.
    if (m.per == "thread" && (m.functions != "*" || m.object != "*")) {
      *err = fmt::format("{} ({}): per = \"thread\" takes only a thread focus", where, m.name);
      return false;
    }
    if (m.per != "thread" && m.thread != "*") {
      *err = fmt::format("{} ({}): a thread focus needs per = \"thread\"", where, m.name);
      return false;
    }
    if (m.per == "thread" && m.kind == "histogram") {
      *err = fmt::format("{} ({}): kind histogram is not kept per thread", where, m.name);
      return false;
    }
    if (m.functions.empty() || m.object.empty() || m.thread.empty()) {
      *err = fmt::format("{} ({}): empty focus pattern", where, m.name);
      return false;
    }
    if (!names.insert(m.name).second) {
      *err = fmt::format("{} ({}): duplicate metric name", where, m.name);
      return false;
    }
    out->push_back(std::move(m));
  }
  return true;
}

const char* probes_library() { return CROSSMOD_PROBES_LIB; }
const char* profile_library() { return CROSSMOD_PROFILE_LIB; }

}  // namespace crossmod::profile
