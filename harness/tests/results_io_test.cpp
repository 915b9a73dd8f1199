// Results CSV: writing, reading back, torn tails, resume keys, JSON helpers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "results/results_io.hpp"
#include "runs/sweep.hpp"

namespace crossmod::harness {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/crossmod-results-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

CellResult sample_result() {
  CellResult r;
  r.spec.protocol = Protocol::sync_core;
  r.spec.wait_ticks = 400;
  r.spec.straddle = 2;
  r.spec.executors = 2;
  r.spec.placement = Placement::cross_package;
  r.spec.rep = 3;
  r.spec.phase = Phase::confirm;
  r.outcome = Outcome::crash;
  r.note = "child killed by SIGSEGV, \"odd\" note, with commas\nand a newline";
  r.dwell_ticks = 5000;
  r.toggles = 1000;
  r.exposed_toggles = 990;
  r.executions = 123456;
  r.state_a = 60000;
  r.state_b = 63456;
  r.traps = 7;
  r.late_traps = 1;
  r.sigsegv = 2;
  r.failures = 0;  // the runner did not count the crash: the row must
  r.duration_s = 1.25;
  r.patcher_pu = 0;
  r.executor_pus = {1, 1};
  r.first_fault_pc_offset = static_cast<std::uint64_t>(-3);
  r.first_fault_bytes = "e8 0e 0e 0e 0e";
  r.site_line_offset = 62;
  return r;
}

TEST(ResultsIo, HeaderHasTheSchemaColumnsInOrder) {
  EXPECT_EQ(results_csv_header(),
            "schema_version,cell_id,phase,protocol,wait_ticks,wait_ns,straddle,site_offset,"
            "executors,placement,rep,dwell_ticks,toggles,exposed_toggles,executions,state_a,"
            "state_b,traps,late_traps,sigill,sigsegv,sigbus,stray_trap,crash,hang,failures,"
            "stopped_early,low_exposure,outcome,duration_s,patcher_pu,executor_pus,"
            "first_fault_pc_offset,first_fault_bytes,note,start_utc_ms,steal_ms,c2c_ticks,round");
  // Version 1 is the same list without the four machine-state columns.
  EXPECT_EQ(results_csv_header_v1() + ",start_utc_ms,steal_ms,c2c_ticks,round",
            results_csv_header());
}

TEST(ResultsIo, MachineStateColumnsRoundTripAndVersion1FilesStillRead) {
  const std::string dir = temp_dir();
  CellResult cr = sample_result();
  cr.start_utc_ms = 1795000000123ULL;
  cr.steal_ms = 20;
  cr.c2c_ticks = 338;
  cr.spec.round = 7;
  ResultRow a = row_from_result(cr, 0, 2.6e9);
  ResultRow unknown = row_from_result(sample_result(), 0, 2.6e9);  // nothing measured
  const std::string path = dir + "/sweep-v2.csv";
  {
    ResultsWriter w(path, false);
    w.append(a);
    w.append(unknown);
  }
  const auto rows = read_results_csv(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].schema_version, 2);
  EXPECT_EQ(rows[0].start_utc_ms, 1795000000123ULL);
  EXPECT_DOUBLE_EQ(rows[0].steal_ms, 20);
  EXPECT_DOUBLE_EQ(rows[0].c2c_ticks, 338);
  EXPECT_EQ(rows[0].round, 7);
  EXPECT_EQ(rows[1].start_utc_ms, 0u);
  EXPECT_LT(rows[1].steal_ms, 0);
  EXPECT_LT(rows[1].c2c_ticks, 0);
  EXPECT_EQ(rows[1].round, -1);

  // A version 1 file (header and rows end at `note`) reads with unknown machine state,
  // and is never appended to with version 2 rows.
  const std::string v1 = dir + "/sweep-v1.csv";
  {
    std::string line = format_csv_row(a);
    for (int i = 0; i < 4; ++i) line.erase(line.rfind(','));
    line.replace(0, 1, "1");
    std::ofstream(v1) << results_csv_header_v1() << "\n" << line << "\n";
  }
  const auto old = read_results_csv(v1);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].schema_version, 1);
  EXPECT_EQ(old[0].protocol, "sync-core");
  EXPECT_EQ(old[0].note, rows[0].note);
  EXPECT_EQ(old[0].round, -1);
  EXPECT_LT(old[0].c2c_ticks, 0);
  EXPECT_THROW(ResultsWriter(v1, true), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST(ResultsIo, RowFromResultEnforcesInvariants) {
  const ResultRow row = row_from_result(sample_result(), 5, 2.6e9);
  EXPECT_EQ(row.protocol, "sync-core");
  EXPECT_EQ(row.placement, "cross-package");
  EXPECT_TRUE(row.crash);
  EXPECT_FALSE(row.hang);
  EXPECT_EQ(row.failures, 1u);  // a crash cell has failures >= 1
  EXPECT_TRUE(row.failed());
  EXPECT_NEAR(row.wait_ns, 153.8, 0.1);
  EXPECT_EQ(row.site_offset, 62u);
  ASSERT_TRUE(row.first_fault_pc_offset.has_value());
  EXPECT_EQ(*row.first_fault_pc_offset, -3);
}

TEST(ResultsIo, WriteReadRoundTrip) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/sweep-x.csv";
  ResultRow a = row_from_result(sample_result(), 0, 2.6e9);
  CellResult clean;
  clean.spec.protocol = Protocol::aligned;
  clean.spec.straddle = 0;
  clean.spec.site_offset = 13;
  clean.toggles = clean.exposed_toggles = 100;
  clean.executor_pus = {1};
  ResultRow b = row_from_result(clean, 0, 2.6e9);
  {
    ResultsWriter w(path, false);
    w.append(a);
    w.append(b);
    EXPECT_EQ(a.cell_id, 1u);
    EXPECT_EQ(b.cell_id, 2u);
  }
  const auto rows = read_results_csv(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(format_csv_row(rows[0]), format_csv_row(a));
  EXPECT_EQ(format_csv_row(rows[1]), format_csv_row(b));
  EXPECT_EQ(rows[0].note, "child killed by SIGSEGV, \"odd\" note, with commas and a newline");
  EXPECT_EQ(rows[0].executor_pus, (std::vector<int>{1, 1}));
  EXPECT_FALSE(rows[1].first_fault_pc_offset.has_value());
  EXPECT_EQ(rows[1].site_offset, 13u);

  // A torn tail (power cut mid-write) is ignored by readers and cut by the next writer.
  { std::ofstream(path, std::ios::app) << "1,3,grid,wordpatch,0"; }
  EXPECT_EQ(read_results_csv(path).size(), 2u);
  {
    ResultsWriter w(path, true);
    EXPECT_EQ(w.next_cell_id(), 3u);
    ResultRow c = b;
    w.append(c);
  }
  const auto again = read_results_csv(path);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[2].cell_id, 3u);
  std::filesystem::remove_all(dir);
}

TEST(ResultsIo, MalformedRowsNameTheColumn) {
  const std::string good = format_csv_row(row_from_result(sample_result(), 1, 2.6e9));
  std::string bad = good;
  bad.replace(bad.find(",sync-core,") + 11, 3, "x00");  // wait_ticks
  EXPECT_THROW(
      {
        try {
          parse_csv_row(bad);
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("wait_ticks"), std::string::npos) << e.what();
          throw;
        }
      },
      std::runtime_error);
  EXPECT_THROW(parse_csv_row("1,2,3"), std::runtime_error);
}

TEST(ResultsIo, ResumeKeyIsTheSameForSpecAndRow) {
  const CellResult r = sample_result();
  const ResultRow row = row_from_result(r, 1, 2.6e9);
  EXPECT_EQ(resume_key(row), resume_key(r.spec));
  EXPECT_EQ(resume_key(row), "sync-core|400|2|0|2|cross-package|3|confirm");
  CellSpec other = r.spec;
  other.rep = 4;
  EXPECT_NE(resume_key(other), resume_key(row));
  other = r.spec;
  other.phase = Phase::search;
  EXPECT_NE(resume_key(other), resume_key(row));
  CellSpec aligned;
  aligned.protocol = Protocol::aligned;
  aligned.straddle = 0;
  aligned.site_offset = 11;
  CellSpec aligned2 = aligned;
  aligned2.site_offset = 13;
  EXPECT_NE(resume_key(aligned), resume_key(aligned2));
}

TEST(ResultsIo, CellLoopSkipsResumedCellsAndWritesOthers) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/sweep-y.csv";
  CellSpec s1;
  s1.wait_ticks = 100;
  CellSpec s2 = s1;
  s2.wait_ticks = 200;
  CellResult done;
  done.spec = s1;
  done.toggles = 10;
  std::vector<ResultRow> resumed = {row_from_result(done, 1, 2.6e9)};
  int ran = 0;
  ResultsWriter w(path, false);
  CellLoop loop(&w, [&](const CellSpec& s) {
    ++ran;
    CellResult r;
    r.spec = s;
    r.toggles = 5;
    return r;
  }, 2.6e9, resumed, nullptr);
  EXPECT_TRUE(loop.is_resumed(s1));
  EXPECT_FALSE(loop.is_resumed(s2));
  ASSERT_TRUE(loop.run(s1, "1/2", std::nullopt));
  ASSERT_TRUE(loop.run(s2, "2/2", std::nullopt));
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(loop.cells_resumed(), 1u);
  const auto rows = read_results_csv(path);
  ASSERT_EQ(rows.size(), 1u);  // only the cell that ran is appended
  EXPECT_EQ(rows[0].wait_ticks, 200u);
  std::filesystem::remove_all(dir);
}

TEST(ResultsIo, JsonHelpers) {
  JsonObject o;
  o.str("kind", "crossmod-sweep-context").str("config_key", "a\"b\\c\nd").num("n", std::uint64_t{3});
  const std::string text = o.render();
  EXPECT_EQ(json_find_string(text, "kind"), "crossmod-sweep-context");
  EXPECT_EQ(json_find_string(text, "config_key"), "a\"b\\c\nd");
  EXPECT_FALSE(json_find_string(text, "missing").has_value());
  // Read back by a parser: a key inside a string value or a nested object is not a
  // top-level field (the substring search this replaced matched both).
  JsonObject nested;
  nested.str("note", "\"run_kind\": \"sweep\"").raw("machine", R"({"run_kind": "calibrate"})");
  EXPECT_FALSE(json_find_string(nested.render(), "run_kind").has_value());
  EXPECT_FALSE(json_find_string("{\"kind\": ", "kind").has_value());  // truncated file
  EXPECT_THROW(JsonObject().raw("bad", "{not json"), std::invalid_argument);
}

TEST(ResultsIo, FindResumableParsesContexts) {
  const auto dir = std::filesystem::temp_directory_path() / "crossmod_find_resumable_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto put = [&](const std::string& stem, const std::string& json) {
    write_file_atomic((dir / (stem + ".csv")).string(), results_csv_header() + "\n");
    if (!json.empty()) write_file_atomic((dir / (stem + ".json")).string(), json);
  };
  auto ctx = [](const char* kind, const char* key) {
    JsonObject o;
    o.str("run_kind", kind).str("config_key", key);
    return o.render();
  };
  put("sweep-20260101T000000Z", ctx("sweep", "k1"));
  put("sweep-20260102T000000Z", ctx("sweep", "k1"));
  put("sweep-20260103T000000Z", ctx("calibrate", "k1"));
  put("sweep-20260104T000000Z", "{\"run_kind\": \"sweep\", \"config_key\": \"k1\"");  // torn
  put("sweep-20260105T000000Z", "");  // no context
  ASSERT_EQ(list_sweep_csvs(dir.string()).size(), 5u);
  EXPECT_EQ(context_json_path((dir / "sweep-x.csv").string()), (dir / "sweep-x.json").string());
  EXPECT_EQ(find_resumable(dir.string(), "sweep", "k1"), (dir / "sweep-20260102T000000Z.csv").string());
  EXPECT_EQ(find_resumable(dir.string(), "calibrate", "k1"), (dir / "sweep-20260103T000000Z.csv").string());
  EXPECT_FALSE(find_resumable(dir.string(), "sweep", "k2").has_value());
  EXPECT_TRUE(list_sweep_csvs((dir / "absent").string()).empty());
  JsonObject with_machine;
  with_machine.str("slug", "top-level-is-not-it").raw("machine", R"({"slug": "amd-x", "cores": 2})");
  EXPECT_EQ(context_machine_slug(with_machine.render()), "amd-x");
  EXPECT_FALSE(context_machine_slug(ctx("sweep", "k1")).has_value());
  EXPECT_FALSE(context_machine_slug("{\"machine\": {\"slug\": ").has_value());
  std::filesystem::remove_all(dir);
}

TEST(ResultsIo, FormatDuration) {
  EXPECT_EQ(format_duration(37), "37s");
  EXPECT_EQ(format_duration(252), "4m12s");
  EXPECT_EQ(format_duration(3720), "1h02m");
}

}  // namespace
}  // namespace crossmod::harness
