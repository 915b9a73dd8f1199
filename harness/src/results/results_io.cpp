// Results CSV and JSON context files; see the schema in results_io.hpp.
// Thread safety: not thread-safe; not async-signal-safe.
#include "results/results_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "crossmod/x86.hpp"

namespace crossmod::harness {
namespace {

constexpr const char* kColumns[] = {
    "schema_version", "cell_id", "phase", "protocol", "wait_ticks", "wait_ns", "straddle",
    "site_offset", "executors", "placement", "rep", "dwell_ticks", "toggles",
    "exposed_toggles", "executions", "state_a", "state_b", "traps", "late_traps", "sigill",
    "sigsegv", "sigbus", "stray_trap", "crash", "hang", "failures", "stopped_early",
    "low_exposure", "outcome", "duration_s", "patcher_pu", "executor_pus",
    "first_fault_pc_offset", "first_fault_bytes", "note",
    // Schema 2: the machine's state per cell (issue 9: tears come in bursts).
    "start_utc_ms", "steal_ms", "c2c_ticks", "round"};
constexpr std::size_t kNumColumns = sizeof(kColumns) / sizeof(kColumns[0]);
constexpr std::size_t kNumColumnsV1 = kNumColumns - 4;

std::string header_of(std::size_t n) {
  std::string h;
  for (std::size_t i = 0; i < n; ++i) {
    if (i) h += ',';
    h += kColumns[i];
  }
  return h;
}

std::string csv_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    // Rows are one line each; a note never breaks the line structure.
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  out += '"';
  return out;
}

// Splits one CSV line (RFC 4180 quoting, no embedded newlines).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw std::runtime_error("unterminated quoted field");
  fields.push_back(std::move(cur));
  return fields;
}

std::uint64_t to_u64(const std::string& s, const char* col) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    throw std::runtime_error(fmt::format("column {}: '{}' is not a non-negative integer", col, s));
  }
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) throw std::runtime_error(fmt::format("column {}: '{}' out of range", col, s));
  return v;
}

std::int64_t to_i64(const std::string& s, const char* col) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE) {
    throw std::runtime_error(fmt::format("column {}: '{}' is not an integer", col, s));
  }
  return v;
}

double to_double(const std::string& s, const char* col) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') {
    throw std::runtime_error(fmt::format("column {}: '{}' is not a number", col, s));
  }
  return v;
}

bool to_bool01(const std::string& s, const char* col) {
  if (s == "0") return false;
  if (s == "1") return true;
  throw std::runtime_error(fmt::format("column {}: '{}' is not 0 or 1", col, s));
}

unsigned to_unsigned(const std::string& s, const char* col) {
  const std::uint64_t v = to_u64(s, col);
  if (v > 0xffffffffULL) throw std::runtime_error(fmt::format("column {}: '{}' out of range", col, s));
  return static_cast<unsigned>(v);
}

void write_all(int fd, const std::string& s, const std::string& path) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    }
    off += static_cast<std::size_t>(n);
  }
}

}  // namespace

const std::string& results_csv_header() {
  static const std::string header = header_of(kNumColumns);
  return header;
}

const std::string& results_csv_header_v1() {
  static const std::string header = header_of(kNumColumnsV1);
  return header;
}

// The spellings live in to_string(Protocol) / to_string(Placement) (protocol.cpp,
// topology.cpp); the CSV and presets accept those and the C++ underscore spelling of the
// hyphenated names.
const char* placement_name(Placement p) { return to_string(p); }

std::optional<Placement> placement_from_name(std::string_view name) {
  for (Placement p : kAllPlacements) {
    if (name == to_string(p)) return p;
  }
  if (name == "cross_package") return Placement::cross_package;
  return std::nullopt;
}

ResultRow row_from_result(const CellResult& r, std::uint64_t cell_id, double tsc_hz) {
  ResultRow row;
  row.cell_id = cell_id;
  row.phase = to_string(r.spec.phase);
  row.protocol = to_string(r.spec.protocol);
  row.wait_ticks = r.spec.wait_ticks;
  row.wait_ns = tsc_hz > 0 ? static_cast<double>(r.spec.wait_ticks) * 1e9 / tsc_hz : 0;
  row.straddle = r.spec.straddle;
  // The site's real offset in its line: S = 0 cells at their chosen offset, straddling
  // cells at line - S (from the runner; this machine's line - S if it did not report it).
  row.site_offset = r.spec.straddle == 0 ? r.spec.site_offset
                    : r.site_line_offset != 0 ? r.site_line_offset
                                              : x86::cache_line_size() - r.spec.straddle;
  row.executors = r.spec.executors;
  row.placement = placement_name(r.spec.placement);
  row.rep = r.spec.rep;
  row.dwell_ticks = r.dwell_ticks;
  row.toggles = r.toggles;
  row.exposed_toggles = r.exposed_toggles;
  row.executions = r.executions;
  row.state_a = r.state_a;
  row.state_b = r.state_b;
  row.traps = r.traps;
  row.late_traps = r.late_traps;
  row.sigill = r.sigill;
  row.sigsegv = r.sigsegv;
  row.sigbus = r.sigbus;
  row.stray_trap = r.stray_trap;
  row.crash = r.outcome == Outcome::crash;
  row.hang = r.outcome == Outcome::hang;
  row.failures = r.failures;
  // A child that died or hung failed at least once, whatever it managed to report.
  if ((row.crash || row.hang) && row.failures == 0) row.failures = 1;
  row.stopped_early = r.stopped_early;
  row.low_exposure = r.low_exposure;
  row.outcome = to_string(r.outcome);
  row.duration_s = r.duration_s;
  row.patcher_pu = r.patcher_pu;
  row.executor_pus = r.executor_pus;
  const bool faulted = r.sigill + r.sigsegv + r.sigbus + r.stray_trap > 0 ||
                       !r.first_fault_bytes.empty();
  if (faulted) row.first_fault_pc_offset = static_cast<std::int64_t>(r.first_fault_pc_offset);
  row.first_fault_bytes = r.first_fault_bytes;
  row.note = r.note;
  row.start_utc_ms = r.start_utc_ms;
  row.steal_ms = r.steal_ms;
  row.c2c_ticks = r.c2c_ticks;
  row.round = r.spec.round;
  return row;
}

std::string format_csv_row(const ResultRow& r) {
  std::string pus;
  for (std::size_t i = 0; i < r.executor_pus.size(); ++i) {
    if (i) pus += ';';
    pus += std::to_string(r.executor_pus[i]);
  }
  return fmt::format(
      "{},{},{},{},{},{:.1f},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},"
      "{},{:.3f},{},{},{},{},{},{},{},{},{}",
      kResultsSchemaVersion, r.cell_id, r.phase, r.protocol, r.wait_ticks, r.wait_ns, r.straddle,
      r.site_offset, r.executors, r.placement, r.rep, r.dwell_ticks, r.toggles,
      r.exposed_toggles, r.executions, r.state_a, r.state_b, r.traps, r.late_traps, r.sigill,
      r.sigsegv, r.sigbus, r.stray_trap, r.crash ? 1 : 0, r.hang ? 1 : 0, r.failures,
      r.stopped_early ? 1 : 0, r.low_exposure ? 1 : 0, r.outcome, r.duration_s, r.patcher_pu,
      pus, r.first_fault_pc_offset ? std::to_string(*r.first_fault_pc_offset) : std::string(),
      csv_quote(r.first_fault_bytes), csv_quote(r.note),
      r.start_utc_ms ? std::to_string(r.start_utc_ms) : std::string(),
      r.steal_ms >= 0 ? fmt::format("{:.0f}", r.steal_ms) : std::string(),
      r.c2c_ticks >= 0 ? fmt::format("{:.0f}", r.c2c_ticks) : std::string(),
      r.round >= 0 ? std::to_string(r.round) : std::string());
}

ResultRow parse_csv_row(const std::string& line) {
  const auto f = split_csv(line);
  // Version 1 rows (which end at `note`) are read as they are; the machine-state
  // columns then stay unknown.
  const bool v1 = !f.empty() && f[0] == "1";
  const std::size_t want = v1 ? kNumColumnsV1 : kNumColumns;
  if (f.size() != want) {
    throw std::runtime_error(fmt::format("expected {} columns, found {}", want, f.size()));
  }
  ResultRow r;
  std::size_t i = 0;
  auto next = [&]() -> const std::string& { return f[i++]; };
  auto col = [&]() { return kColumns[i - 1]; };
  auto u64 = [&]() { const auto& s = next(); return to_u64(s, col()); };
  auto uns = [&]() { const auto& s = next(); return to_unsigned(s, col()); };
  auto b01 = [&]() { const auto& s = next(); return to_bool01(s, col()); };
  r.schema_version = static_cast<int>(uns());
  if (r.schema_version != 1 && r.schema_version != kResultsSchemaVersion) {
    throw std::runtime_error(fmt::format("schema_version {} is not 1 or {}", r.schema_version,
                                         kResultsSchemaVersion));
  }
  r.cell_id = u64();
  r.phase = next();
  r.protocol = next();
  r.wait_ticks = u64();
  { const auto& s = next(); r.wait_ns = to_double(s, col()); }
  r.straddle = uns();
  r.site_offset = uns();
  r.executors = uns();
  r.placement = next();
  r.rep = uns();
  r.dwell_ticks = u64();
  r.toggles = u64();
  r.exposed_toggles = u64();
  r.executions = u64();
  r.state_a = u64();
  r.state_b = u64();
  r.traps = u64();
  r.late_traps = u64();
  r.sigill = u64();
  r.sigsegv = u64();
  r.sigbus = u64();
  r.stray_trap = u64();
  r.crash = b01();
  r.hang = b01();
  r.failures = u64();
  r.stopped_early = b01();
  r.low_exposure = b01();
  r.outcome = next();
  { const auto& s = next(); r.duration_s = to_double(s, col()); }
  { const auto& s = next(); r.patcher_pu = static_cast<int>(to_i64(s, col())); }
  {
    const auto& s = next();
    std::size_t start = 0;
    while (!s.empty() && start <= s.size()) {
      const std::size_t end = std::min(s.find(';', start), s.size());
      r.executor_pus.push_back(static_cast<int>(to_i64(s.substr(start, end - start), col())));
      start = end + 1;
    }
  }
  {
    const auto& s = next();
    if (!s.empty()) r.first_fault_pc_offset = to_i64(s, col());
  }
  r.first_fault_bytes = next();
  r.note = next();
  if (v1) return r;
  {
    const auto& s = next();
    if (!s.empty()) r.start_utc_ms = to_u64(s, col());
  }
  {
    const auto& s = next();
    if (!s.empty()) r.steal_ms = to_double(s, col());
  }
  {
    const auto& s = next();
    if (!s.empty()) r.c2c_ticks = to_double(s, col());
  }
  {
    const auto& s = next();
    if (!s.empty()) r.round = to_i64(s, col());
  }
  return r;
}

std::vector<ResultRow> read_results_csv(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<ResultRow> rows;
  std::size_t pos = 0;
  int lineno = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // torn last line: never a whole row
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    if (lineno == 1) {
      if (line != results_csv_header() && line != results_csv_header_v1()) {
        throw std::runtime_error(fmt::format("{}:1: not a crossmod results file (header differs)", path));
      }
      continue;
    }
    if (line.empty()) continue;
    try {
      rows.push_back(parse_csv_row(line));
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}:{}: {}", path, lineno, e.what()));
    }
  }
  if (lineno == 0) throw std::runtime_error(fmt::format("{}: empty results file", path));
  return rows;
}

std::string resume_key(const ResultRow& r) {
  // Straddling cells are identified by S alone (their offset follows from the line size).
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", r.protocol, r.wait_ticks, r.straddle,
                     r.straddle == 0 ? r.site_offset : 0u, r.executors, r.placement, r.rep, r.phase);
}

std::string resume_key(const CellSpec& s) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", to_string(s.protocol), s.wait_ticks,
                     s.straddle, s.straddle == 0 ? s.site_offset : 0u, s.executors,
                     placement_name(s.placement), s.rep, to_string(s.phase));
}

ResultsWriter::ResultsWriter(const std::string& path, bool append_existing) : path_(path) {
  if (append_existing) {
    // Validates the file and continues its numbering; a torn tail is cut off so the
    // next row starts on its own line. Rows of another schema are not mixed in.
    const auto rows = read_results_csv(path);
    if (read_file(path).rfind(results_csv_header() + "\n", 0) != 0) {
      throw std::runtime_error(fmt::format(
          "{}: written by an older crossmod (results schema 1); cannot append to it", path));
    }
    for (const auto& r : rows) next_id_ = std::max(next_id_, r.cell_id + 1);
    const std::string text = read_file(path);
    const std::size_t keep = text.rfind('\n') + 1;
    if (keep != text.size()) {
      if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
        throw std::runtime_error(fmt::format("{}: truncate failed: {}", path, std::strerror(errno)));
      }
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  } else {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  }
  if (fd_ < 0) {
    throw std::runtime_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  if (!append_existing) {
    write_all(fd_, results_csv_header() + "\n", path_);
    ::fsync(fd_);
  }
}

ResultsWriter::~ResultsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultsWriter::append(ResultRow& row) {
  row.cell_id = next_id_++;
  // One write per row: a crash of this process can leave at most one partial line, which
  // readers ignore (no trailing newline) and the next append truncates.
  write_all(fd_, format_csv_row(row) + "\n", path_);
  if (::fsync(fd_) != 0 && errno != EINVAL) {
    throw std::runtime_error(fmt::format("{}: fsync failed: {}", path_, std::strerror(errno)));
  }
}

namespace {
using Json = nlohmann::ordered_json;

// Pretty text with two-space indent. Invalid UTF-8 (a CPU brand or a note could in
// principle carry any bytes) is replaced, not thrown on: a results file must be written.
std::string dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}
}  // namespace

std::string json_escape(std::string_view s) {
  const std::string quoted = json_string(s);
  return quoted.substr(1, quoted.size() - 2);
}

std::string json_string(std::string_view s) { return dump(Json(std::string(s)), -1); }

JsonObject& JsonObject::raw(const std::string& key, std::string json_value) {
  if (!Json::accept(json_value))
    throw std::invalid_argument(fmt::format("JSON field '{}': malformed value '{}'", key, json_value));
  fields_.emplace_back(key, std::move(json_value));
  return *this;
}
JsonObject& JsonObject::str(const std::string& key, std::string_view value) {
  return raw(key, json_string(value));
}
// Numbers keep fmt's shortest text (an integral double is written "3", not "3.0"), so
// the files read as they always have; the parser in render() takes that text as is.
JsonObject& JsonObject::num(const std::string& key, double value) {
  if (!std::isfinite(value)) return raw(key, "null");
  return raw(key, fmt::format("{}", value));
}
JsonObject& JsonObject::num(const std::string& key, std::uint64_t value) {
  return raw(key, std::to_string(value));
}
JsonObject& JsonObject::num(const std::string& key, std::int64_t value) {
  return raw(key, std::to_string(value));
}
JsonObject& JsonObject::boolean(const std::string& key, bool value) {
  return raw(key, value ? "true" : "false");
}

// The layout the files have always had: one field per line, values as the caller wrote
// them (validated in raw()), a multi-line value moved right to its key's depth.
std::string JsonObject::render(int indent) const {
  if (fields_.empty()) return "{}";
  const std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  std::string out = "{\n";
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    out += pad + json_string(fields_[i].first) + ": ";
    for (char c : fields_[i].second) {
      out += c;
      if (c == '\n') out += pad;
    }
    out += i + 1 < fields_.size() ? ",\n" : "\n";
  }
  out += std::string(static_cast<std::size_t>(indent), ' ') + "}";
  return out;
}

std::string json_one_line(const Json& j) {
  std::string out;
  if (j.is_object() && !j.empty()) {
    for (const auto& [key, value] : j.items()) {
      out += out.empty() ? "{" : ", ";
      out += json_string(key) + ": " + json_one_line(value);
    }
    return out + "}";
  }
  if (j.is_array() && !j.empty()) {
    for (const Json& value : j) {
      out += out.empty() ? "[" : ", ";
      out += json_one_line(value);
    }
    return out + "]";
  }
  return dump(j, -1);  // a scalar, {} or []
}

std::string json_array_of_strings(const std::vector<std::string>& v) {
  return json_one_line(Json(v));
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  try {
    write_all(fd, text, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: rename failed: {}", path, std::strerror(e)));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
std::optional<std::string> string_field(const Json& j, const std::string& key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}
}  // namespace

std::optional<std::string> json_find_string(const std::string& json, const std::string& key) {
  return string_field(Json::parse(json, nullptr, /*allow_exceptions=*/false), key);
}

std::string utc_stamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string utc_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::string> list_sweep_csvs(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> csvs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("sweep-", 0) == 0 && e.path().extension() == ".csv") {
      csvs.push_back(e.path().string());
    }
  }
  std::sort(csvs.begin(), csvs.end());
  return csvs;
}

std::string context_json_path(const std::string& csv) {
  return std::filesystem::path(csv).replace_extension(".json").string();
}

std::optional<std::string> context_machine_slug(const std::string& context_json) {
  const Json ctx = Json::parse(context_json, nullptr, /*allow_exceptions=*/false);
  if (!ctx.is_object()) return std::nullopt;
  const auto machine = ctx.find("machine");
  if (machine == ctx.end()) return std::nullopt;
  return string_field(*machine, "slug");
}

std::string context_site_entry(const std::string& context_json) {
  const Json ctx = Json::parse(context_json, nullptr, /*allow_exceptions=*/false);
  if (!ctx.is_object()) return "fallthrough";
  const auto cfg = ctx.find("config");
  if (cfg == ctx.end() || !cfg->is_object()) return "fallthrough";
  const auto grid = cfg->find("grid");
  if (grid == cfg->end() || !grid->is_object()) return "fallthrough";
  return string_field(*grid, "site_entry").value_or("fallthrough");
}

std::optional<std::string> find_resumable(const std::string& dir, const std::string& kind,
                                          const std::string& config_key) {
  std::vector<std::string> csvs = list_sweep_csvs(dir);
  for (auto it = csvs.rbegin(); it != csvs.rend(); ++it) {  // newest first
    std::string text;
    try {
      text = read_file(context_json_path(*it));
    } catch (const std::exception&) {
      continue;
    }
    const Json ctx = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (string_field(ctx, "run_kind") == kind && string_field(ctx, "config_key") == config_key) {
      return *it;
    }
  }
  return std::nullopt;
}

}  // namespace crossmod::harness
