// Run context for results files; see run_context.hpp.
#include "results/run_context.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "runs/preset.hpp"
#include "results/results_io.hpp"
#include "machine/sysinfo.hpp"

namespace crossmod::harness {

std::string git_sha() {
  const std::string cmd =
      fmt::format("git -C '{}' rev-parse HEAD 2>/dev/null", std::string(CROSSMOD_SOURCE_DIR));
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "unknown";
  char buf[128] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  const int rc = ::pclose(p);
  std::string sha = got ? buf : "";
  while (!sha.empty() && (sha.back() == '\n' || sha.back() == '\r')) sha.pop_back();
  if (rc != 0 || sha.size() < 7) return "unknown";
  return sha;
}

std::string compiler_version() {
#ifdef __VERSION__
  return __VERSION__;
#else
  return "unknown";
#endif
}

std::string command_line() {
  std::string text;
  try {
    text = read_file("/proc/self/cmdline");
  } catch (const std::exception&) {
    return "";
  }
  std::string out;
  for (char c : text) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string kernel_release() {
  utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return u.release;
}

std::string microcode() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("microcode", 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) return "";
      const auto b = line.find_first_not_of(" \t", colon + 1);
      return b == std::string::npos ? "" : line.substr(b);
    }
  }
  return "";
}

std::string sweep_machine_json(const Topology& topo) {
  using Json = nlohmann::ordered_json;
  const Json m = Json::parse(machine_context_json(topo));
  // The analysis keys machines by "slug" (as in configs/tmax); sysinfo calls it
  // machine_slug. The short name goes first unless sysinfo already has it.
  if (m.contains("slug")) return json_one_line(m);
  Json out = Json::object();
  out["slug"] = machine_slug();
  for (const auto& [key, value] : m.items()) out[key] = value;
  return json_one_line(out);
}

namespace {
// The nearest existing ancestor of `p` (p itself if it exists).
std::filesystem::path existing_ancestor(std::filesystem::path p) {
  std::error_code ec;
  p = std::filesystem::absolute(p, ec);
  while (!p.empty() && !std::filesystem::exists(p, ec)) {
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  return p;
}
}  // namespace

void check_writable_dir(const std::string& dir, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("{} '{}' is not a directory", what, dir));
    if (::access(dir.c_str(), W_OK | X_OK) != 0) throw UsageError(fmt::format("{} '{}' is not writable", what, dir));
    return;
  }
  const fs::path anc = existing_ancestor(dir);
  if (!fs::is_directory(anc, ec) || ::access(anc.c_str(), W_OK | X_OK) != 0) {
    throw UsageError(fmt::format("{} '{}' cannot be created ('{}' is not a writable directory)", what, dir,
                                 anc.string()));
  }
}

void check_writable_file(const std::string& file, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw UsageError(fmt::format("{} '{}' is a directory", what, file));
  if (fs::exists(file, ec) && ::access(file.c_str(), W_OK) != 0) {
    throw UsageError(fmt::format("{} '{}' is not writable", what, file));
  }
  fs::path parent = fs::path(file).parent_path();
  check_writable_dir(parent.empty() ? std::string(".") : parent.string(), what);
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create '{}': {}", dir, ec.message()));
}

}  // namespace crossmod::harness

namespace crossmod::harness {

std::string SweepContext::render() const {
  JsonObject o;
  o.num("schema_version", static_cast<std::int64_t>(kResultsSchemaVersion))
      .str("kind", "crossmod-sweep-context")
      .str("run_kind", run_kind)
      .str("results", results_csv)
      .str("preset", preset)
      .str("config_key", config_key)
      .str("git_sha", git_sha)
      .str("compiler", compiler)
      .str("crossmod_version", CROSSMOD_VERSION)
      .str("command", command)
      .str("started_utc", started_utc)
      .raw("finished_utc", finished_utc.empty() ? std::string("null") : json_string(finished_utc))
      .raw("last_resumed_utc", last_resumed_utc.empty() ? std::string("null") : json_string(last_resumed_utc))
      .boolean("interrupted", interrupted)
      .num("cells_planned", cells_planned)
      .num("cells_run", cells_run)
      .num("cells_resumed", cells_resumed)
      .raw("warnings", json_array_of_strings(warnings))
      .raw("machine", machine_json.empty() ? std::string("{}") : machine_json)
      .raw("config", config_json.empty() ? std::string("{}") : config_json);
  return o.render() + "\n";
}

ResultPaths choose_result_paths(const std::string& out_dir, const std::string& resume_csv,
                                SweepContext* ctx) {
  ResultPaths p;
  if (!resume_csv.empty()) {
    p.csv = resume_csv;
    p.json = p.csv.substr(0, p.csv.size() - 4) + ".json";
    std::string old;
    try {
      old = read_file(p.json);
    } catch (const std::exception&) {
    }
    ctx->started_utc = json_find_string(old, "started_utc").value_or(utc_iso8601());
    ctx->last_resumed_utc = utc_iso8601();
    return p;
  }
  const std::string stamp = utc_stamp();
  p.csv = fmt::format("{}/sweep-{}.csv", out_dir, stamp);
  for (int i = 2; std::filesystem::exists(p.csv); ++i) p.csv = fmt::format("{}/sweep-{}-{}.csv", out_dir, stamp, i);
  p.json = p.csv.substr(0, p.csv.size() - 4) + ".json";
  ctx->started_utc = utc_iso8601();
  return p;
}

void describe_run(SweepContext* ctx, const std::string& run_kind, const SweepConfig& cfg,
                  const std::string& preset, const std::string& csv_path, const Topology& topo,
                  const std::vector<std::string>& warnings) {
  ctx->run_kind = run_kind;
  ctx->config_key = cfg.config_key();
  ctx->config_json = cfg.to_json();
  ctx->preset = preset;
  ctx->results_csv = std::filesystem::path(csv_path).filename().string();
  ctx->git_sha = git_sha();
  ctx->compiler = compiler_version();
  ctx->command = command_line();
  ctx->machine_json = sweep_machine_json(topo);
  ctx->warnings = warnings;
}

}  // namespace crossmod::harness
