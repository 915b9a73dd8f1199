// The Tmax verdict (schema_version 2): each verdict loads, an unknown or misplaced one is a
// parse error naming the field and line, and the engine refuses (Status::unverified, output
// filled) every Tmax that is not "bounded" unless the caller opts in.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "crossmod/status.hpp"
#include "crossmod/tmax_config.hpp"
#include "tmax_config_internal.hpp"

namespace crossmod {
namespace {

namespace fs = std::filesystem;

const TmaxLoadOptions kAllow{.allow_unverified = true};

// A version 2 file; line 3 holds the verdict.
std::string v2(const std::string& verdict_line, bool with_tmax = true) {
  std::string s = "# written by crossmod calibrate\nschema_version = 2\n" + verdict_line +
                  "\n\n[machine]\nslug = \"test-slug\"\n";
  if (with_tmax)
    s += "\n[tmax]\nobserved_ticks = 800\nrecommended_ticks = 1600\ntsc_hz = 2.0e9\n";
  return s;
}

const char* const kV1 =
    "schema_version = 1\n[machine]\nslug = \"test-slug\"\n"
    "[tmax]\nobserved_ticks = 800\nrecommended_ticks = 1600\ntsc_hz = 2.0e9\n";

class TmaxVerdictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/crossmod-verdict-XXXXXX";
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
  fs::path dir_;
};

TEST(TmaxVerdict, Names) {
  EXPECT_STREQ(to_string(TmaxVerdict::bounded), "bounded");
  EXPECT_STREQ(to_string(TmaxVerdict::not_established), "not-established");
  EXPECT_STREQ(to_string(TmaxVerdict::unbounded), "unbounded");
  EXPECT_STREQ(to_string(TmaxVerdict::legacy), "legacy");
  EXPECT_STREQ(to_string(TmaxVerdict::built_in_default), "built-in-default");
  EXPECT_STREQ(to_string(Status::unverified), "unverified");
  EXPECT_EQ(kTmaxSchemaVersion, 2);
  EXPECT_EQ(TmaxConfig{}.verdict, TmaxVerdict::built_in_default);
}

TEST_F(TmaxVerdictTest, BoundedIsHandedOutWithoutOptingIn) {
  const std::string path = write("b.toml", v2("verdict = \"bounded\""));
  TmaxConfig cfg;
  ConfigError err;
  ASSERT_EQ(load_tmax_config(path, &cfg, &err), Status::ok) << err.to_string();
  EXPECT_EQ(cfg.verdict, TmaxVerdict::bounded);
  EXPECT_EQ(cfg.recommended_ticks, 1600u);
  EXPECT_FALSE(cfg.is_default);
}

struct Refused {
  const char* name;
  std::string text;
  TmaxVerdict verdict;
  int line;  // of the verdict key; 0 for a legacy file
};

class TmaxRefusalTest : public TmaxVerdictTest, public ::testing::WithParamInterface<Refused> {};

TEST_P(TmaxRefusalTest, RefusedUnlessTheCallerOptsIn) {
  const Refused r = GetParam();
  const std::string path = write("r.toml", r.text);
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(load_tmax_config(path, &cfg, &err), Status::unverified);
  // Filled, so the caller can show what it refused and why.
  EXPECT_EQ(cfg.verdict, r.verdict);
  EXPECT_EQ(cfg.recommended_ticks, 1600u);
  EXPECT_EQ(cfg.source, path);
  EXPECT_EQ(err.field, "verdict");
  EXPECT_EQ(err.file, path);
  EXPECT_EQ(err.line, r.line);
  EXPECT_NE(err.message.find("allow_unverified"), std::string::npos) << err.to_string();

  TmaxConfig opted;
  ASSERT_EQ(load_tmax_config(path, &opted, &err, kAllow), Status::ok) << err.to_string();
  EXPECT_EQ(opted.verdict, r.verdict);
  EXPECT_EQ(opted.recommended_ticks, 1600u);
}

INSTANTIATE_TEST_SUITE_P(
    Verdicts, TmaxRefusalTest,
    ::testing::Values(Refused{"NotEstablished", v2("verdict = \"not-established\""),
                              TmaxVerdict::not_established, 3},
                      Refused{"Unbounded", v2("verdict = \"unbounded\""), TmaxVerdict::unbounded,
                              3},
                      Refused{"Legacy", kV1, TmaxVerdict::legacy, 0}),
    [](const ::testing::TestParamInfo<Refused>& p) { return std::string(p.param.name); });

TEST_F(TmaxVerdictTest, WithoutATmaxNothingIsHandedOutEvenOptedIn) {
  const std::string path = write("u.toml", v2("verdict = \"unbounded\"", false));
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(load_tmax_config(path, &cfg, &err, kAllow), Status::unverified);
  EXPECT_EQ(cfg.verdict, TmaxVerdict::unbounded);
  EXPECT_EQ(cfg.recommended_ticks, 0u) << "0: no Tmax, never a wait to use";
  EXPECT_EQ(cfg.machine, "test-slug");
  EXPECT_NE(err.message.find("no wordpatch Tmax"), std::string::npos) << err.to_string();
}

TEST_F(TmaxVerdictTest, BoundedWithoutATmaxIsMalformed) {
  const std::string path = write("b.toml", v2("verdict = \"bounded\"", false));
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(load_tmax_config(path, &cfg, &err, kAllow), Status::parse_error);
  EXPECT_EQ(err.field, "tmax.recommended_ticks") << err.to_string();
}

struct BadVerdict {
  const char* name;
  std::string text;
  int line;
  const char* message;  // a substring of the error message
};

class TmaxBadVerdictTest : public TmaxVerdictTest,
                           public ::testing::WithParamInterface<BadVerdict> {};

TEST_P(TmaxBadVerdictTest, ParseErrorNamesFieldAndLine) {
  const BadVerdict b = GetParam();
  const std::string path = write("bad.toml", b.text);
  TmaxConfig cfg;
  ConfigError err;
  // Opting in does not let a malformed verdict through.
  EXPECT_EQ(load_tmax_config(path, &cfg, &err, kAllow), Status::parse_error);
  EXPECT_EQ(err.field, "verdict") << err.to_string();
  EXPECT_EQ(err.line, b.line) << err.to_string();
  EXPECT_NE(err.message.find(b.message), std::string::npos) << err.to_string();
  // Appended piecewise: GCC 12 gives a false -Wrestrict on ":" + std::string.
  std::string where = ":";
  where += std::to_string(b.line);
  where += ": verdict: ";
  EXPECT_NE(err.to_string().find(where), std::string::npos) << err.to_string();
  EXPECT_TRUE(cfg.is_default) << "output untouched on a parse error";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TmaxBadVerdictTest,
    ::testing::Values(
        BadVerdict{"Unknown", v2("verdict = \"probably-fine\""), 3, "unknown verdict"},
        BadVerdict{"Spelling", v2("verdict = \"not_established\""), 3, "unknown verdict"},
        BadVerdict{"NotAString", v2("verdict = 1"), 3, "must be a string"},
        BadVerdict{"MissingInV2", v2("# no verdict"), 0, "missing required field"},
        BadVerdict{"InAVersion1File",
                   std::string("schema_version = 1\nverdict = \"bounded\"\n") + (kV1 + 19), 2,
                   "schema_version 2"}),
    [](const ::testing::TestParamInfo<BadVerdict>& p) { return std::string(p.param.name); });

TEST_F(TmaxVerdictTest, TheBuiltInDefaultIsRefusedUnlessOptedIn) {
  const std::string empty = (dir_ / "none").string();
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(detail::resolve_tmax_config(nullptr, {empty}, "test-slug", &cfg, &err),
            Status::unverified);
  EXPECT_TRUE(cfg.is_default);
  EXPECT_EQ(cfg.verdict, TmaxVerdict::built_in_default);
  EXPECT_EQ(cfg.recommended_ticks, kDefaultTmaxTicks);
  EXPECT_EQ(err.file, "built-in default");
  EXPECT_EQ(err.field, "verdict");

  ASSERT_EQ(detail::resolve_tmax_config(nullptr, {empty}, "test-slug", &cfg, &err, kAllow),
            Status::ok);
  EXPECT_EQ(cfg.verdict, TmaxVerdict::built_in_default);
}

TEST_F(TmaxVerdictTest, ARefusedFileIsNotReplacedByALaterOneOrTheDefault) {
  const std::string first = (dir_ / "a").string();
  const std::string second = (dir_ / "b").string();
  write("a/test-slug.toml", v2("verdict = \"not-established\""));
  write("b/test-slug.toml", v2("verdict = \"bounded\""));
  TmaxConfig cfg;
  ConfigError err;
  EXPECT_EQ(detail::resolve_tmax_config(nullptr, {first, second}, "test-slug", &cfg, &err),
            Status::unverified);
  EXPECT_EQ(cfg.verdict, TmaxVerdict::not_established);
  EXPECT_EQ(fs::path(cfg.source), fs::path(first) / "test-slug.toml");

  // The environment variable goes through the same gate.
  const std::string env = write("env.toml", v2("verdict = \"unbounded\""));
  EXPECT_EQ(detail::resolve_tmax_config(env.c_str(), {second}, "test-slug", &cfg, &err),
            Status::unverified);
  EXPECT_EQ(cfg.verdict, TmaxVerdict::unbounded);
  EXPECT_EQ(detail::resolve_tmax_config(env.c_str(), {second}, "test-slug", &cfg, &err, kAllow),
            Status::ok);
}

// The public auto entry point with the environment variable set: the default options refuse,
// the opt-in accepts; the variable is restored afterwards.
TEST_F(TmaxVerdictTest, AutoTakesTheOptions) {
  const char* saved = std::getenv("CROSSMOD_TMAX_CONFIG");
  const std::string saved_value = saved != nullptr ? saved : "";
  const std::string legacy = write("legacy.toml", kV1);
  ASSERT_EQ(setenv("CROSSMOD_TMAX_CONFIG", legacy.c_str(), 1), 0);
  TmaxConfig cfg;
  ConfigError err;
  const Status refused = load_tmax_config_auto(&cfg, &err);
  const Status accepted = load_tmax_config_auto(&cfg, &err, kAllow);
  if (saved != nullptr) {
    setenv("CROSSMOD_TMAX_CONFIG", saved_value.c_str(), 1);
  } else {
    unsetenv("CROSSMOD_TMAX_CONFIG");
  }
  EXPECT_EQ(refused, Status::unverified);
  EXPECT_EQ(accepted, Status::ok);
  EXPECT_EQ(cfg.verdict, TmaxVerdict::legacy);
}

}  // namespace
}  // namespace crossmod
