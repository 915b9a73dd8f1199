// Sweep presets and durations: the shipped presets parse, and bad input is one clear UsageError that
// names the file and line.
#include <gtest/gtest.h>

#include <string>

#include "commands/commands.hpp"
#include "runs/preset.hpp"
#include "runs/sweep.hpp"

namespace crossmod::harness {
namespace {

const char* kGood = R"(schema_version = 1
name = "t"
description = "test"
[grid]
protocols = ["wordpatch", "aligned", "sync-core"]
waits = [0, 100]
straddles = [1, 4]
aligned_offsets = [0, 13]
executors = [1, 2]
placements = ["spread"]
reps = 2
toggles = 1000
dwell = "auto"
watchdog_s = 5
max_failures = 10
[grid.protocol_toggles]
sync-core = 50
[calibrate]
budget_s = 30
ladder = [0, 800, 100]
)";

// Expects a UsageError whose message contains every needle.
void expect_usage_error(const std::string& text, std::initializer_list<const char*> needles) {
  try {
    parse_preset(text, "p.toml");
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const UsageError& e) {
    for (const char* n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
    }
  }
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Preset, ParsesAndExpands) {
  const SweepConfig cfg = parse_preset(kGood, "p.toml");
  EXPECT_EQ(cfg.name, "t");
  EXPECT_EQ(cfg.toggles_for(Protocol::sync_core), 50u);
  EXPECT_EQ(cfg.toggles_for(Protocol::wordpatch), 1000u);
  EXPECT_EQ(cfg.calibrate.ladder, (std::vector<std::uint64_t>{0, 100, 800}));  // sorted
  const auto cells = cfg.expand();
  // reps 2 x waits 2 x executors 2 x (wordpatch 2 S + aligned 2 offsets + sync-core 2 S)
  EXPECT_EQ(cells.size(), 2u * 2 * 2 * 6);
  int aligned = 0;
  for (const auto& c : cells) {
    if (c.protocol == Protocol::aligned) {
      ++aligned;
      EXPECT_EQ(c.straddle, 0u);
    }
    EXPECT_EQ(c.phase, Phase::grid);
  }
  EXPECT_EQ(aligned, 16);
  EXPECT_EQ(cells.front().rep, 0u);
  EXPECT_EQ(cells.back().rep, 1u);
}

TEST(Preset, WaitRangeTable) {
  const auto cfg = parse_preset(replace(kGood, "waits = [0, 100]", "waits = { from = 0, to = 2400, step = 100 }"), "p.toml");
  EXPECT_EQ(cfg.waits.size(), 25u);
  EXPECT_EQ(cfg.waits.back(), 2400u);
}

TEST(Preset, MalformedTomlNamesTheLine) {
  expect_usage_error(replace(kGood, "reps = 2", "reps = = 2"), {"p.toml:11:", "malformed TOML"});
}

TEST(Preset, UnknownProtocol) {
  expect_usage_error(replace(kGood, "\"aligned\"", "\"alinged\""), {"p.toml:5:", "unknown protocol 'alinged'"});
}

TEST(Preset, StraddleOutOfRange) {
  expect_usage_error(replace(kGood, "straddles = [1, 4]", "straddles = [1, 5]"), {"p.toml:7:", "straddle 5 is outside 0..4"});
}

TEST(Preset, NegativeWait) {
  expect_usage_error(replace(kGood, "waits = [0, 100]", "waits = [0, -100]"), {"p.toml:6:", "negative"});
}

TEST(Preset, ZeroExecutors) {
  expect_usage_error(replace(kGood, "executors = [1, 2]", "executors = [0]"), {"p.toml:9:", "executor count 0"});
}

TEST(Preset, UnknownKeyAndPlacementAndVersion) {
  expect_usage_error(replace(kGood, "reps = 2", "repz = 2"), {"p.toml:11:", "grid.repz", "unknown key"});
  expect_usage_error(replace(kGood, "\"spread\"", "\"far\""), {"p.toml:10:", "unknown placement"});
  expect_usage_error(replace(kGood, "schema_version = 1", "schema_version = 2"), {"p.toml:1:", "unsupported version"});
  expect_usage_error(replace(kGood, "dwell = \"auto\"", "dwell = \"soon\""), {"p.toml:13:", "grid.dwell"});
}

TEST(Preset, Overrides) {
  SweepConfig cfg = parse_preset(kGood, "p.toml");
  Overrides ov;
  ov.protocols = "naive,selftest-torn";
  ov.waits = "0:300:100,1000";
  ov.straddles = "1,2,3";
  ov.toggles = "77";
  ov.dwell = "auto";
  apply_overrides(cfg, ov);
  EXPECT_EQ(cfg.waits, (std::vector<std::uint64_t>{0, 100, 200, 300, 1000}));
  EXPECT_EQ(cfg.toggles_for(Protocol::sync_core), 77u);
  EXPECT_EQ(cfg.protocols.size(), 2u);

  auto bad = [&](Overrides o, const char* needle) {
    SweepConfig c = parse_preset(kGood, "p.toml");
    try {
      apply_overrides(c, o);
      ADD_FAILURE() << "no error, expected " << needle;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Overrides o;
  o.protocols = "wordpatch,bogus";
  bad(o, "unknown protocol 'bogus'");
  o = {};
  o.straddles = "5";
  bad(o, "outside 0..4");
  o = {};
  o.waits = "-5";
  bad(o, "negative");
  o = {};
  o.executors = "0";
  bad(o, "executor count 0");
  o = {};
  o.placements = "nowhere";
  bad(o, "unknown placement");
}

TEST(Preset, ConfigKeyChangesWithTheGrid) {
  SweepConfig a = parse_preset(kGood, "a.toml");
  SweepConfig b = parse_preset(kGood, "b.toml");
  EXPECT_EQ(a.config_key(), b.config_key());  // the source path is not part of the key
  Overrides ov;
  ov.reps = "3";
  apply_overrides(b, ov);
  EXPECT_NE(a.config_key(), b.config_key());
}

TEST(Preset, ShippedPresetsParse) {
  for (const char* name : {"smoke", "quick", "paper"}) {
    const std::string path = std::string(CROSSMOD_SOURCE_DIR) + "/configs/sweep/" + name + ".toml";
    const SweepConfig cfg = load_preset_file(path);
    EXPECT_EQ(cfg.name, name);
  }
  const SweepConfig paper = load_preset_file(std::string(CROSSMOD_SOURCE_DIR) + "/configs/sweep/paper.toml");
  EXPECT_EQ(paper.waits.size(), 25u);
  EXPECT_EQ(paper.executors, (std::vector<unsigned>{2, 3, 4, 5, 6}));
  EXPECT_EQ(paper.reps, 5u);
  EXPECT_EQ(paper.toggles, 50000000u);
  EXPECT_THROW(find_preset("no-such-preset"), UsageError);
}

}  // namespace
}  // namespace crossmod::harness

namespace crossmod::harness {
namespace {

// The one duration parser of every command (sweep, soak, calibrate, crosscheck --for;
// profile --period/--epoch): hours down to nanoseconds, compound forms, clear errors.
TEST(Duration, ParsesEveryUnitAndCompoundForms) {
  EXPECT_DOUBLE_EQ(parse_duration("2h", "--for"), 7200);
  EXPECT_DOUBLE_EQ(parse_duration("90m", "--for"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m", "--for"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("45", "--for"), 45);
  EXPECT_DOUBLE_EQ(parse_duration("1.5s", "--for"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("10ms", "--period"), 0.01);
  EXPECT_DOUBLE_EQ(parse_duration("250us", "--period"), 250e-6);
  EXPECT_DOUBLE_EQ(parse_duration("500ns", "--period"), 500e-9);
  EXPECT_DOUBLE_EQ(parse_duration("1m30s", "--for"), 90);
}

TEST(Duration, BadTextNamesTheOption) {
  for (const char* bad : {"", "h", "10x", "1h30", "10 ms", "-5s", "1.2.3s", "0", "0s", "5mss"}) {
    try {
      (void)parse_duration(bad, "--for");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--for"), std::string::npos) << bad;
    }
  }
}

}  // namespace
}  // namespace crossmod::harness
