// Results files of `crossmod sweep` and `crossmod calibrate`: the per-cell CSV (one row
// appended and fsync'd as each cell ends), its JSON context file, reading both back for
// --resume and for Tmax derivation.
// Thread safety: not thread-safe (one writer per file); not async-signal-safe.
//
// CSV schema, version 2 (sweep-<stamp>.csv); readers also read version 1 files, whose
// rows end at `note` (the four machine-state columns are then unknown). One header line, then one row per finished
// cell; rows are only ever written whole. Columns, in this order:
//   schema_version        1
//   cell_id               1-based sequence number of the row in this file
//   phase                 grid (sweep) | control | search | confirm | sentinel (calibrate,
//                         soak) | soak
//   protocol              wordpatch | naive | callpatch | aligned | sync-core
//                         (selftest-hang | selftest-crash | selftest-torn: tests only)
//   wait_ticks            W, TSC ticks injected between protocol steps
//   wait_ns               W in ns at the TSC frequency of the machine context
//   straddle              S, bytes of the site before the line boundary (0 = inside a line)
//   site_offset           offset of the site's first byte in its cache line (S > 0: line - S)
//   executors             N executor threads
//   placement             spread | smt | cross-package
//   rep                   repetition index (calibrate: round within its phase)
//   dwell_ticks           dwell between toggles actually used
//   toggles               toggles performed
//   exposed_toggles       toggles after which some executor ran the site
//   executions            executor calls of the site
//   state_a, state_b      executions that ran the call / the NOP form
//   traps, late_traps     engine locked-site traps / traps after unlock
//   sigill, sigsegv, sigbus, stray_trap   faults by class
//   crash, hang           0/1: the cell's child died / hit the watchdog
//   failures              toggles with >= 1 fault; >= 1 for a crash or hang cell
//   stopped_early         0/1: stopped at max_failures
//   low_exposure          0/1: too few exposed toggles; not evidence of zero failures
//   outcome               ok | crash | hang | error | blind
//   duration_s            wall time of the cell
//   patcher_pu            OS PU index of the patcher
//   executor_pus          OS PU indexes of the executors joined with ';'
//   first_fault_pc_offset fault pc - site address (signed); empty when no fault
//   first_fault_bytes     quoted; site bytes at the first fault, hex
//   note                  quoted; reason for crash/hang/error/blind, fault detail
//   start_utc_ms          (v2) cell start, Unix time in ms
//   steal_ms              (v2) steal time of the patcher's and executors' PUs during the
//                         cell, summed over those PUs, from /proc/stat (10 ms resolution);
//                         empty when unknown
//   c2c_ticks             (v2) core-to-core one-way line transfer between the patcher's
//                         and the first executor's PU, median of a short sample taken just
//                         before the cell; empty when unknown
//   round                 (v2) the interleaved round the cell belongs to (calibrate, soak,
//                         sweep --rounds); empty when the run has no rounds
//
// Context JSON (sweep-<stamp>.json beside the CSV, written before the first cell and
// rewritten at the end): schema_version 1, kind "crossmod-sweep-context", run_kind
// (sweep | calibrate), results (CSV file name), preset, config_key (what --resume
// matches), git_sha, compiler, crossmod_version, command, started_utc, finished_utc (null
// while running or when interrupted), last_resumed_utc, interrupted, cells_planned,
// cells_run, cells_resumed, warnings, machine (sysinfo's context plus "slug"), config (the
// resolved preset).
// calibrate also writes calibrate-<stamp>.json (kind "crossmod-calibrate"): status (ok |
// negative-control-failed | no-boundary), tmax, evidence, controls, notes.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cell/cell.hpp"

namespace crossmod::harness {

inline constexpr int kResultsSchemaVersion = 2;

// The CSV header line (without newline), and the one of version 1 files.
const std::string& results_csv_header();
const std::string& results_csv_header_v1();

// One CSV row in typed form. Every analysis inside the harness (stats, Tmax) works on
// rows, so a resumed file and a live run are treated alike.
struct ResultRow {
  int schema_version = kResultsSchemaVersion;
  std::uint64_t cell_id = 0;
  std::string phase = "grid";
  std::string protocol;
  std::uint64_t wait_ticks = 0;
  double wait_ns = 0;
  unsigned straddle = 0;
  unsigned site_offset = 0;
  unsigned executors = 1;
  std::string placement = "spread";
  unsigned rep = 0;
  std::uint64_t dwell_ticks = 0;
  std::uint64_t toggles = 0, exposed_toggles = 0, executions = 0;
  std::uint64_t state_a = 0, state_b = 0, traps = 0, late_traps = 0;
  std::uint64_t sigill = 0, sigsegv = 0, sigbus = 0, stray_trap = 0;
  bool crash = false, hang = false;
  std::uint64_t failures = 0;
  bool stopped_early = false, low_exposure = false;
  std::string outcome = "ok";
  double duration_s = 0;
  int patcher_pu = -1;
  std::vector<int> executor_pus;
  std::optional<std::int64_t> first_fault_pc_offset;
  std::string first_fault_bytes;
  std::string note;
  // Schema 2; unknown (v1 rows, or not measured) as 0 / -1 / -1 / -1.
  std::uint64_t start_utc_ms = 0;
  double steal_ms = -1;
  double c2c_ticks = -1;
  std::int64_t round = -1;

  // True when this row counts as a failure for Tmax: a fault, a crash or a hang.
  bool failed() const { return failures > 0 || crash || hang; }
  // True when this row is evidence of zero failures: ran to completion, no failure, and
  // enough exposure to be trusted.
  bool clean_evidence() const { return outcome == to_string(Outcome::ok) && !failed() && !low_exposure; }
};

// CLI names, the ones written in the CSV. Protocols are spelled by to_string(Protocol)
// (protocol.hpp, the registry).
const char* placement_name(Placement p);
std::optional<Placement> placement_from_name(std::string_view name);

// A row from a finished cell. Enforces the schema's invariants: crash/hang imply
// failures >= 1.
ResultRow row_from_result(const CellResult& r, std::uint64_t cell_id, double tsc_hz);

std::string format_csv_row(const ResultRow& row);
// Parses one data line; throws std::runtime_error naming the column on malformed input.
ResultRow parse_csv_row(const std::string& line);
// Reads a whole file (header checked). A last line without newline (a torn write from a
// power cut) is ignored. Throws std::runtime_error with file:line.
std::vector<ResultRow> read_results_csv(const std::string& path);

// Resume key: protocol, wait, straddle, site_offset, executors, placement, rep, phase.
std::string resume_key(const ResultRow& row);
std::string resume_key(const CellSpec& spec);

// Appends rows to a results CSV; each append is one write(2) followed by fsync, so the
// file on disk only ever ends with whole rows.
class ResultsWriter {
 public:
  // Creates the file with its header, or opens an existing one for appending (its rows
  // continue the cell_id sequence). Throws std::runtime_error on I/O errors.
  ResultsWriter(const std::string& path, bool append_existing);
  ~ResultsWriter();
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;

  std::uint64_t next_cell_id() const { return next_id_; }
  // Assigns the cell_id and appends.
  void append(ResultRow& row);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t next_id_ = 1;
};

// --- JSON, for the context files: nlohmann::json underneath (one escaper, one parser).
// Strings that are not valid UTF-8 are written with U+FFFD in place of the bad bytes.
std::string json_escape(std::string_view s);  // the inside of a JSON string literal
std::string json_string(std::string_view s);  // quoted and escaped

// Builder for a JSON object whose keys keep their insertion order (the files read in the
// order a person scans them). raw() takes JSON text and checks it with the parser:
// malformed text is a bug in the caller and throws std::invalid_argument naming the key.
// render() writes one `"key": value` per line with two-space indent; values appear as
// given (a nested render() or json_one_line() text).
class JsonObject {
 public:
  JsonObject& raw(const std::string& key, std::string json_value);
  JsonObject& str(const std::string& key, std::string_view value);
  JsonObject& num(const std::string& key, double value);
  JsonObject& num(const std::string& key, std::uint64_t value);
  JsonObject& num(const std::string& key, std::int64_t value);
  JsonObject& boolean(const std::string& key, bool value);
  std::string render(int indent = 0) const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key, JSON text (validated)
};
std::string json_array_of_strings(const std::vector<std::string>& v);  // one line
// A JSON value on one line in the form sysinfo and the context files have always used:
// `{"a": 1, "b": [2, 3]}`, a space after every ':' and ','.
std::string json_one_line(const nlohmann::ordered_json& j);

// Writes a file atomically (temp file + fsync + rename). Throws std::runtime_error.
void write_file_atomic(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);  // throws std::runtime_error

// The value of a top-level string field of a JSON object text (unescaped); nullopt if
// the text does not parse as a JSON object, the key is absent or its value is not a
// string.
std::optional<std::string> json_find_string(const std::string& json, const std::string& key);

// UTC timestamps: "20261121T045719Z" for file names, ISO 8601 for contents.
std::string utc_stamp();
std::string utc_iso8601();

// --- The results directory: DIR/sweep-<stamp>.csv, each with its context JSON beside it.
// Every sweep-*.csv in `dir`, oldest first (stamps sort in time order); empty if `dir`
// does not exist.
std::vector<std::string> list_sweep_csvs(const std::string& dir);
// The context file of a sweep CSV: the same path with .json for .csv.
std::string context_json_path(const std::string& csv);
// machine.slug of a context file's text (the machine a sweep ran on); nullopt if the
// text does not parse or has none. For pooling earlier runs of the same machine.
std::optional<std::string> context_machine_slug(const std::string& context_json);
// How that run's cells reached the site: config.grid.site_entry ("call" since
// 2026-11-27); "fallthrough" when absent (older runs) or unreadable.
std::string context_site_entry(const std::string& context_json);
// For --resume: the newest sweep-*.csv in `dir` whose JSON context has run_kind == `kind` and
// config_key == `config_key`; nullopt if none. Returns the CSV path. A context that does
// not parse is skipped (it cannot be the file to continue).
std::optional<std::string> find_resumable(const std::string& dir, const std::string& kind,
                                          const std::string& config_key);

}  // namespace crossmod::harness
