// Tmax config loading: valid files, malformed TOML (line reported), missing/ill-typed
// fields (field named), missing files, the resolution order, and the built-in default.
#include "crossmod/tmax_config.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "crossmod/machine.hpp"
#include "tmax_config_internal.hpp"

namespace crossmod {
namespace {

namespace fs = std::filesystem;

// kValid is a schema_version 1 (legacy) file and the built-in default is unverified: these
// tests are about parsing and resolution, so they opt in (tmax_verdict_test.cpp covers the
// refusal).
const TmaxLoadOptions kAllow{.allow_unverified = true};

const char* const kValid = R"(# written by crossmod calibrate
schema_version = 1

[machine]
slug = "amd-fam26-mod2-step1-1pkg"
vendor = "AuthenticAMD"
family = 26

[tmax]
observed_ticks = 800
recommended_ticks = 1600
recommended_ns = 615.4
observed_ns = 307.7
tsc_hz = 2.6e9
margin_rule = "2x observed, at least the line transfer time"

[evidence]
toggles_at_or_above = 1000000
)";

class TmaxConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/crossmod-tmax-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  // kValid with the line containing `needle` replaced by `replacement`.
  static std::string edit(const std::string& needle, const std::string& replacement) {
    std::string s = kValid;
    const auto pos = s.find(needle);
    EXPECT_NE(pos, std::string::npos) << needle;
    const auto eol = s.find('\n', pos);
    return s.replace(pos, eol - pos, replacement);
  }
  fs::path dir_;
};

TEST_F(TmaxConfigTest, ValidFileLoads) {
  const std::string path = write("ok.toml", kValid);
  TmaxConfig cfg;
  ConfigError err;
  ASSERT_EQ(load_tmax_config(path, &cfg, &err, kAllow), Status::ok) << err.to_string();
  EXPECT_EQ(cfg.recommended_ticks, 1600u);
  EXPECT_EQ(cfg.observed_ticks, 800u);
  EXPECT_DOUBLE_EQ(cfg.recommended_ns, 615.4);
  EXPECT_DOUBLE_EQ(cfg.tsc_hz, 2.6e9);
  EXPECT_EQ(cfg.machine, "amd-fam26-mod2-step1-1pkg");
  EXPECT_EQ(cfg.margin_rule, "2x observed, at least the line transfer time");
  EXPECT_EQ(cfg.source, path);
  EXPECT_FALSE(cfg.is_default);
}

TEST_F(TmaxConfigTest, OptionalFieldsMayBeAbsentAndIntegerHzIsAccepted) {
  const std::string path = write("min.toml",
                                 "schema_version = 1\n[machine]\nslug = \"x\"\n"
                                 "[tmax]\nobserved_ticks = 0\nrecommended_ticks = 3000\n"
                                 "tsc_hz = 3000000000\n");
  TmaxConfig cfg;
  ConfigError err;
  ASSERT_EQ(load_tmax_config(path, &cfg, &err, kAllow), Status::ok) << err.to_string();
  EXPECT_EQ(cfg.recommended_ticks, 3000u);
  EXPECT_DOUBLE_EQ(cfg.recommended_ns, 1000.0) << "derived from ticks and tsc_hz";
  EXPECT_TRUE(cfg.margin_rule.empty());
}

TEST_F(TmaxConfigTest, MalformedTomlReportsTheLine) {
  const std::string path = write("bad.toml", edit("observed_ticks", "observed_ticks = = 3"));
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(load_tmax_config(path, &cfg, &err), Status::parse_error);
  EXPECT_EQ(err.file, path);
  EXPECT_EQ(err.line, 10);
  EXPECT_FALSE(err.message.empty());
  EXPECT_NE(err.to_string().find(path + ":10:"), std::string::npos) << err.to_string();
  EXPECT_TRUE(cfg.is_default) << "output untouched on error";
}

struct FieldCase {
  const char* needle;       // line of kValid to replace
  const char* replacement;  // "" removes the field
  const char* field;
  int line;                 // expected line (table header for a missing key)
};

class TmaxConfigFieldTest : public TmaxConfigTest,
                            public ::testing::WithParamInterface<FieldCase> {};

TEST_P(TmaxConfigFieldTest, ErrorNamesTheField) {
  const FieldCase c = GetParam();
  const std::string path = write("f.toml", edit(c.needle, c.replacement));
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(load_tmax_config(path, &cfg, &err), Status::parse_error);
  EXPECT_EQ(err.field, c.field) << err.to_string();
  EXPECT_EQ(err.line, c.line) << err.to_string();
  EXPECT_NE(err.to_string().find(c.field), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, TmaxConfigFieldTest,
    ::testing::Values(
        FieldCase{"schema_version", "", "schema_version", 0},
        FieldCase{"schema_version", "schema_version = \"1\"", "schema_version", 2},
        FieldCase{"schema_version", "schema_version = 3", "schema_version", 2},
        FieldCase{"slug", "", "machine.slug", 4},
        FieldCase{"slug", "slug = 7", "machine.slug", 5},
        FieldCase{"recommended_ticks", "", "tmax.recommended_ticks", 9},
        FieldCase{"recommended_ticks", "recommended_ticks = 1.5", "tmax.recommended_ticks", 11},
        FieldCase{"recommended_ticks", "recommended_ticks = 0", "tmax.recommended_ticks", 11},
        FieldCase{"observed_ticks", "", "tmax.observed_ticks", 9},
        FieldCase{"observed_ticks", "observed_ticks = -5", "tmax.observed_ticks", 10},
        FieldCase{"tsc_hz", "", "tmax.tsc_hz", 9},
        FieldCase{"tsc_hz", "tsc_hz = \"fast\"", "tmax.tsc_hz", 14},
        FieldCase{"margin_rule", "margin_rule = 2", "tmax.margin_rule", 15},
        FieldCase{"[tmax]", "[tmaxx]", "tmax.recommended_ticks", 0}),
    [](const ::testing::TestParamInfo<FieldCase>& p) {
      return "Case" + std::to_string(p.index);
    });

TEST_F(TmaxConfigTest, MissingFileIsNotFound) {
  TmaxConfig cfg;
  ConfigError err;
  const std::string path = (dir_ / "nope.toml").string();
  EXPECT_EQ(load_tmax_config(path, &cfg, &err), Status::not_found);
  EXPECT_EQ(err.file, path);
  EXPECT_EQ(load_tmax_config(dir_.string(), &cfg, &err), Status::not_found) << "a directory";
}

TEST_F(TmaxConfigTest, ResolutionOrder) {
  const std::string slug = "test-slug";
  const std::string first = (dir_ / "a").string();
  const std::string second = (dir_ / "b").string();
  TmaxConfig cfg;
  ConfigError err;

  // Nothing anywhere: the default, flagged as such.
  ASSERT_EQ(detail::resolve_tmax_config(nullptr, {first, second}, slug, &cfg, &err, kAllow),
            Status::ok);
  EXPECT_TRUE(cfg.is_default);
  EXPECT_EQ(cfg.recommended_ticks, kDefaultTmaxTicks);
  EXPECT_EQ(cfg.recommended_ticks, 3000u);
  EXPECT_EQ(cfg.source, "built-in default");

  // The second directory is used when the first has no file; the first wins when it has.
  write("b/test-slug.toml", edit("recommended_ticks", "recommended_ticks = 222"));
  ASSERT_EQ(detail::resolve_tmax_config("", {first, second}, slug, &cfg, &err, kAllow),
            Status::ok);
  EXPECT_EQ(cfg.recommended_ticks, 222u);
  write("a/test-slug.toml", edit("recommended_ticks", "recommended_ticks = 111"));
  ASSERT_EQ(detail::resolve_tmax_config(nullptr, {first, second}, slug, &cfg, &err, kAllow),
            Status::ok);
  EXPECT_EQ(cfg.recommended_ticks, 111u);
  EXPECT_FALSE(cfg.is_default);

  // The environment variable overrides both.
  const std::string env = write("env.toml", edit("recommended_ticks", "recommended_ticks = 333"));
  ASSERT_EQ(detail::resolve_tmax_config(env.c_str(), {first, second}, slug, &cfg, &err, kAllow),
            Status::ok);
  EXPECT_EQ(cfg.recommended_ticks, 333u);
  EXPECT_EQ(cfg.source, env);

  // A broken file found in the search path is an error, not a silent default.
  write("a/test-slug.toml", "schema_version = [");
  EXPECT_EQ(detail::resolve_tmax_config(nullptr, {first, second}, slug, &cfg, &err),
            Status::parse_error);
}

TEST_F(TmaxConfigTest, EnvironmentNamingABadFileIsAnError) {
  const std::string bad = write("bad.toml", "[tmax\n");
  const std::string missing = (dir_ / "missing.toml").string();
  const char* saved = std::getenv("CROSSMOD_TMAX_CONFIG");
  const std::string saved_value = saved != nullptr ? saved : "";
  TmaxConfig cfg;
  ConfigError err;

  ASSERT_EQ(setenv("CROSSMOD_TMAX_CONFIG", bad.c_str(), 1), 0);
  EXPECT_EQ(load_tmax_config_auto(&cfg, &err), Status::parse_error);
  EXPECT_EQ(err.file, bad);
  EXPECT_EQ(err.line, 1);

  ASSERT_EQ(setenv("CROSSMOD_TMAX_CONFIG", missing.c_str(), 1), 0);
  EXPECT_EQ(load_tmax_config_auto(&cfg, &err), Status::not_found);
  EXPECT_NE(err.message.find("CROSSMOD_TMAX_CONFIG"), std::string::npos);

  const std::string good = write("good.toml", kValid);
  ASSERT_EQ(setenv("CROSSMOD_TMAX_CONFIG", good.c_str(), 1), 0);
  ASSERT_EQ(load_tmax_config_auto(&cfg, &err, kAllow), Status::ok);
  EXPECT_EQ(cfg.recommended_ticks, 1600u);

  if (saved != nullptr) {
    setenv("CROSSMOD_TMAX_CONFIG", saved_value.c_str(), 1);
  } else {
    unsetenv("CROSSMOD_TMAX_CONFIG");
  }
}

// Sets $CROSSMOD_TMAX_CONFIG (nullptr: unsets it) and the working directory for one scope
// and restores both, also when an ASSERT leaves the test early.
class AutoLookupScope {
 public:
  explicit AutoLookupScope(const fs::path& cwd) : cwd_(fs::current_path()) {
    const char* saved = std::getenv("CROSSMOD_TMAX_CONFIG");
    had_env_ = saved != nullptr;
    if (had_env_) env_ = saved;
    fs::current_path(cwd);
  }
  ~AutoLookupScope() {
    fs::current_path(cwd_);
    if (had_env_) {
      setenv("CROSSMOD_TMAX_CONFIG", env_.c_str(), 1);
    } else {
      unsetenv("CROSSMOD_TMAX_CONFIG");
    }
  }
  static void set_env(const char* value) {
    if (value == nullptr) {
      unsetenv("CROSSMOD_TMAX_CONFIG");
    } else {
      setenv("CROSSMOD_TMAX_CONFIG", value, 1);
    }
  }

 private:
  fs::path cwd_;
  bool had_env_ = false;
  std::string env_;
};

// The documented order through the public entry point, with the real environment
// variable and working directory: $CROSSMOD_TMAX_CONFIG, then ./configs/tmax/<slug>.toml
// (before the source tree's copy, and before the default). The files are schema 1
// (legacy), so the lookup opts in; refusals are tested in tmax_verdict_test.cpp.
TEST_F(TmaxConfigTest, AutoLookupOrderEnvThenWorkingDirectory) {
  const std::string slug = machine_slug();
  write("configs/tmax/" + slug + ".toml", edit("recommended_ticks", "recommended_ticks = 111"));
  const std::string env = write("env.toml", edit("recommended_ticks", "recommended_ticks = 333"));
  AutoLookupScope scope(dir_);
  TmaxConfig cfg;
  ConfigError err;

  AutoLookupScope::set_env(nullptr);
  ASSERT_EQ(load_tmax_config_auto(&cfg, &err, kAllow), Status::ok) << err.to_string();
  EXPECT_EQ(cfg.recommended_ticks, 111u) << "./configs/tmax was not used; source " << cfg.source;
  EXPECT_FALSE(cfg.is_default);

  AutoLookupScope::set_env("");  // set but empty counts as unset
  ASSERT_EQ(load_tmax_config_auto(&cfg, &err, kAllow), Status::ok) << err.to_string();
  EXPECT_EQ(cfg.recommended_ticks, 111u);

  AutoLookupScope::set_env(env.c_str());
  ASSERT_EQ(load_tmax_config_auto(&cfg, &err, kAllow), Status::ok) << err.to_string();
  EXPECT_EQ(cfg.recommended_ticks, 333u) << "$CROSSMOD_TMAX_CONFIG must win over ./configs";
  EXPECT_EQ(cfg.source, env);
}

// The real search path: $CROSSMOD_TMAX_CONFIG unset, run from an empty directory, so only
// <source>/configs/tmax can supply a file. With a calibrated config for this machine
// committed, auto must find it there; without one, it must fall back to the default.
// (The fallback itself is tested hermetically through detail::resolve_tmax_config.)
TEST_F(TmaxConfigTest, AutoFromAnEmptyDirectoryUsesTheSourceTreeOrTheDefault) {
  const std::string slug = machine_slug();
  const fs::path committed = fs::path(CROSSMOD_SOURCE_DIR) / "configs/tmax" / (slug + ".toml");
  const char* saved = std::getenv("CROSSMOD_TMAX_CONFIG");
  const std::string saved_value = saved != nullptr ? saved : "";
  unsetenv("CROSSMOD_TMAX_CONFIG");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  TmaxConfig cfg;
  ConfigError err;
  const Status s = load_tmax_config_auto(&cfg, &err, kAllow);
  fs::current_path(cwd);
  if (saved != nullptr) setenv("CROSSMOD_TMAX_CONFIG", saved_value.c_str(), 1);
  ASSERT_EQ(s, Status::ok) << err.to_string();
  if (fs::exists(committed)) {
    EXPECT_FALSE(cfg.is_default);
    EXPECT_EQ(fs::path(cfg.source), committed);
    EXPECT_EQ(cfg.machine, slug);
  } else {
    EXPECT_TRUE(cfg.is_default);
    EXPECT_EQ(cfg.recommended_ticks, 3000u);
    EXPECT_EQ(cfg.source, "built-in default");
  }
}

TEST(ConfigError, Format) {
  ConfigError e{"f.toml", 3, "tmax.tsc_hz", "must be a number"};
  EXPECT_EQ(e.to_string(), "f.toml:3: tmax.tsc_hz: must be a number");
}

}  // namespace
}  // namespace crossmod

// Every Tmax config committed under configs/tmax/ (written by `crossmod calibrate`) must
// stay loadable by the engine as the schema evolves, and must describe the machine its
// file name says.
TEST(CommittedTmaxConfigs, EveryFileLoads) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(CROSSMOD_SOURCE_DIR) / "configs" / "tmax";
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".toml") continue;
    ++files;
    crossmod::TmaxConfig cfg;
    crossmod::ConfigError err;
    // Legacy (schema_version 1) files are unverified but must still load.
    ASSERT_EQ(crossmod::load_tmax_config(e.path().string(), &cfg, &err,
                                         crossmod::TmaxLoadOptions{.allow_unverified = true}),
              crossmod::Status::ok)
        << err.to_string();
    EXPECT_FALSE(cfg.is_default);
    EXPECT_EQ(cfg.machine, e.path().stem().string());
    EXPECT_GE(cfg.recommended_ticks, cfg.observed_ticks);
    EXPECT_GT(cfg.tsc_hz, 0);
  }
  EXPECT_GT(files, 0) << "no calibrated config committed in " << dir;
}
