// End-to-end tests of `crossmod profile` on prof_mt_cyg / prof_mt_pfe (mt_prog.cpp): every
// policy, every way of ending, bad input. Exact checks only: counts against the program's
// own, never a time.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kLeafA = "(anonymous namespace)::leaf_a(unsigned int)";
const char* const kLeafB = "(anonymous namespace)::leaf_b(unsigned int)";

struct Outcome {
  int status = -1;
  std::string out, err;
  fs::path dir;
};

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("crossmod-prof-test-" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs crossmod with `args` (shell words, no quoting needed for our paths), with `env`
// (VAR=value words) added to its environment.
Outcome crossmod(const std::string& name, const std::string& args, bool with_out = true, const std::string& env = "") {
  Outcome r;
  r.dir = fresh_dir(name);
  fs::create_directories(r.dir.parent_path());
  const fs::path o = r.dir.string() + ".stdout", e = r.dir.string() + ".stderr";
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(CROSSMOD_BIN) + " profile " +
                          (with_out ? "--out " + r.dir.string() + " " : std::string()) + args + " >" + o.string() +
                          " 2>" + e.string();
  const int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

json report(const Outcome& r) { return json::parse(slurp(r.dir / "profile.json")); }

const json* function(const json& j, const std::string& name) {
  for (const json& f : j["functions"])
    if (f["name"] == name) return &f;
  return nullptr;
}

// Whether a note of the report contains `text`.
bool has_note(const json& j, const std::string& text) {
  for (const json& n : j["notes"])
    if (n.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

std::map<std::string, unsigned long> truth(const std::string& out) {
  std::map<std::string, unsigned long> m;
  std::istringstream s(out);
  std::string k;
  unsigned long v;
  while (s >> k >> v) m[k] = v;
  return m;
}

struct Case {
  const char* prog;
  const char* policy;
};

class PolicyTest : public ::testing::TestWithParam<Case> {};

TEST_P(PolicyTest, ReportListsFunctionsAndNeverOvercounts) {
  const Case c = GetParam();
  const std::string prog = std::string(c.prog) == "cyg" ? PROF_MT_CYG : PROF_MT_PFE;
  const Outcome r = crossmod(std::string(c.prog) + "-" + c.policy,
                         std::string("--quiet --policy ") + c.policy + " -- " + prog + " 4 20000");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");  // --quiet, and the runtime has nothing to complain about
  const auto t = truth(r.out);
  ASSERT_EQ(t.size(), 2u) << r.out;  // the program's stdout is its own
  const json j = report(r);
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["policy"]["name"], c.policy);
  EXPECT_EQ(j["exit"]["kind"], "exit");
  EXPECT_EQ(j["exit"]["execs"], 0);
  for (const auto& [name, key] : {std::pair{kLeafA, "leaf_a"}, std::pair{kLeafB, "leaf_b"}}) {
    const json* f = function(j, name);
    ASSERT_NE(f, nullptr) << name;
    const unsigned long calls = (*f)["calls_observed"], samples = (*f)["samples"];
    EXPECT_LE(calls, t.at(key)) << name;
    EXPECT_LE(samples, t.at(key)) << name;  // not <= calls: a cyg hook on stale code can time a call it did not count
    EXPECT_EQ((*f)["provider"], std::string(c.prog) == "cyg" ? "cyg" : "patchable");
    const std::string policy = c.policy;
    if (policy == "full") {
      EXPECT_EQ(calls, t.at(key)) << name;
      // Every call is timed, except a call during which its thread discovered a probe (cyg:
      // the site's first execution; the discovery's cost would be in the sample).
      EXPECT_EQ(samples + (*f)["discovery_exits"].get<unsigned long>(), calls) << name;
      EXPECT_EQ((*f)["calls_estimated"].get<double>(), static_cast<double>(calls));
    } else if (policy == "none") {
      EXPECT_EQ(calls, 0u) << name;
    } else {
      // On from the start: at least its first epoch's quota is sampled.
      EXPECT_GE(samples, 1u) << name;
      EXPECT_GE((*f)["calls_estimated"].get<double>(), static_cast<double>(calls)) << name;
    }
    if (samples > 0) {
      const double mean = (*f)["mean_ticks"];
      EXPECT_GT(mean, 0);
      unsigned long hist = 0;
      for (const json& n : (*f)["hist"]["counts"]) hist += n.get<unsigned long>();
      EXPECT_EQ(hist, samples) << name;
    }
  }
  // The daemon's own CPU time: none has no daemon; the others' daemon ran (it switched
  // functions on, or under full at least woke) and cannot have used more than the run.
  const double daemon_s = j["overhead"]["daemon_cpu_s"], cpu_s = j["run"]["cpu_s"];
  if (std::string(c.policy) == "none") {
    EXPECT_EQ(daemon_s, 0.0);
  } else {
    EXPECT_GE(daemon_s, 0.0);
    EXPECT_LE(daemon_s, cpu_s);
    EXPECT_DOUBLE_EQ(j["overhead"]["daemon_share"].get<double>(), cpu_s > 0 ? daemon_s / cpu_s : 0.0);
  }
  // Compensation remainders: cyg always (its sites may turn up any time), patchable when
  // the program has patchable functions.
  EXPECT_TRUE(j["overhead"]["self_ticks"]["cyg"].is_number_integer());
  EXPECT_EQ(j["overhead"]["self_ticks"]["patchable"].is_number_integer(), std::string(c.prog) == "pfe");
  EXPECT_EQ(j["overhead"]["nest_ticks"]["patchable"].is_number_integer(), std::string(c.prog) == "pfe");
  ASSERT_TRUE(j["metrics"].is_array());
  EXPECT_EQ(j["metrics"].size(), 4u);  // configs/metrics/default.toml
  EXPECT_TRUE(fs::exists(r.dir / "profile.csv"));
  EXPECT_TRUE(fs::exists(r.dir / "profile.folded"));
}

INSTANTIATE_TEST_SUITE_P(Providers, PolicyTest,
                         ::testing::Values(Case{"cyg", "full"}, Case{"cyg", "paper"}, Case{"cyg", "budget"},
                                           Case{"cyg", "converge"}, Case{"cyg", "none"}, Case{"pfe", "full"},
                                           Case{"pfe", "paper"}, Case{"pfe", "budget"}, Case{"pfe", "converge"},
                                           Case{"pfe", "none"}),
                         [](const auto& pi) { return std::string(pi.param.prog) + "_" + pi.param.policy; });

class ColdTest : public ::testing::TestWithParam<const char*> {};

// Cold samples: under `full` the probes go on once, so each thread's first leaf_a() call
// runs leaf_a's sites for the first time and is its only cold sample: 4 workers, plus
// main's one call where it is sampled (pfe; cyg: main's call discovers the site and is not
// a sample). worker() runs once per thread (cyg: the first thread's call discovers it): its
// samples hold every first run. The on-CPU split leaves cold samples out.
TEST_P(ColdTest, FirstRunsPerThreadAreCold) {
  const std::string prog = std::string(GetParam()) == std::string("cyg") ? PROF_MT_CYG : PROF_MT_PFE;
  const Outcome r = crossmod(std::string(GetParam()) + "-cold", std::string("--quiet --policy full -- ") + prog + " 4 2000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const bool perf = j["run"]["switch_detection"] == "perf";
  for (const char* name : {kLeafA, kLeafB}) {
    const json* f = function(j, name);
    ASSERT_NE(f, nullptr) << name;
    const unsigned long cold = (*f)["cold_samples"], samples = (*f)["samples"];
    EXPECT_GE(cold, 4u) << name;
    EXPECT_LE(cold, 5u) << name;
    if (perf) {
      EXPECT_EQ((*f)["oncpu_samples"].get<unsigned long>() + (*f)["switched_samples"].get<unsigned long>() +
                    (*f)["unknown_switch_samples"].get<unsigned long>() + cold,
                samples)
          << name;
    }
  }
  const json* w = function(j, "(anonymous namespace)::worker(unsigned int)");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ((*w)["cold_samples"], (*w)["samples"]);
  EXPECT_EQ((*w)["samples"].get<unsigned long>() + (*w)["discovery_exits"].get<unsigned long>(), 4u);
}
INSTANTIATE_TEST_SUITE_P(Providers, ColdTest, ::testing::Values("cyg", "pfe"));

class EndingTest : public ::testing::TestWithParam<const char*> {};

// However the program ends, the report is there and, under `full`, exact.
TEST_P(EndingTest, FullCountsSurvive) {
  const std::string prog = std::string(GetParam()) == std::string("cyg") ? PROF_MT_CYG : PROF_MT_PFE;
  struct E {
    const char* how;
    int status;
    const char* kind;
    int execs;
  };
  for (const E e : {E{"_exit", 3, "exit", 0}, E{"signal", 128 + 9, "signal", 0}, E{"exec", 0, "exit", 1}}) {
    const Outcome r = crossmod(std::string(GetParam()) + "-end-" + e.how,
                           std::string("--quiet --policy full -- ") + prog + " 2 5000 " + e.how);
    EXPECT_EQ(r.status, e.status) << e.how << r.err;
    const auto t = truth(r.out);
    ASSERT_EQ(t.size(), 2u) << e.how << ": " << r.out;
    const json j = report(r);
    EXPECT_EQ(j["exit"]["kind"], e.kind) << e.how;
    EXPECT_EQ(j["exit"]["execs"], e.execs) << e.how;
    const json* f = function(j, kLeafA);
    ASSERT_NE(f, nullptr) << e.how;
    EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), t.at("leaf_a")) << e.how;
    if (std::string(e.how) == "signal") {
      EXPECT_EQ(j["exit"]["signal"], 9);
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Providers, EndingTest, ::testing::Values("cyg", "pfe"));

// A patchable -O2 build with tail calls (std::thread's _M_run jumps to the thread function):
// the probes layer chains a tail-called exit-probed frame above its caller's, so by default
// every function keeps its exit probe on, the program survives with every policy that
// switches exit probes on, and the leaves get exact counts and latencies. Before that fix
// this aborted ("exit trampoline without a frame").
TEST(ProfileTailCalls, PatchableTailCallersKeepExitProbes) {
  for (const char* policy : {"full", "paper"}) {
    const Outcome r = crossmod(std::string("tail-") + policy,
                               std::string("--quiet --policy ") + policy + " -- " + PROF_MT_PFE_TAIL + " 4 5000");
    ASSERT_EQ(r.status, 0) << policy << r.err;
    const auto t = truth(r.out);
    const json j = report(r);
    for (const json& f : j["functions"]) EXPECT_TRUE(f["exit_probe"].get<bool>()) << f["name"];
    const json* leaf = function(j, kLeafA);
    ASSERT_NE(leaf, nullptr);
    EXPECT_GE((*leaf)["samples"].get<unsigned long>(), 1u);
    if (std::string(policy) == "full") {
      EXPECT_EQ((*leaf)["calls_observed"].get<unsigned long>(), t.at("leaf_a"));
      // Exits equal entries: a tail-called frame's exit fires too.
      EXPECT_EQ((*leaf)["samples"].get<unsigned long>() + (*leaf)["discovery_exits"].get<unsigned long>(),
                t.at("leaf_a"));
    }
  }
}

// The old workaround, opt-in: CROSSMOD_PROFILE_TAILCALL_GUARD=1 (passed through by the
// launcher) keeps the exit probes of possible tail-callers off. GCC 12 -O2: _M_run tail-calls.
TEST(ProfileTailCalls, GuardKeepsTailCallersExitsOff) {
  setenv("CROSSMOD_PROFILE_TAILCALL_GUARD", "1", 1);
  const Outcome r = crossmod("tail-guard", std::string("--quiet --policy full -- ") + PROF_MT_PFE_TAIL + " 4 5000");
  unsetenv("CROSSMOD_PROFILE_TAILCALL_GUARD");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto t = truth(r.out);
  const json j = report(r);
  std::size_t off = 0;
  for (const json& f : j["functions"]) off += f["exit_probe"].get<bool>() ? 0 : 1;
  EXPECT_GE(off, 1u);
  const json* leaf = function(j, kLeafA);
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ((*leaf)["calls_observed"].get<unsigned long>(), t.at("leaf_a"));
}

// Inlined cyg copies: `hot` has one entry probe per inlined copy. Once the function is
// switched off, every copy's probe must go off (before the fix only the last-found one did,
// and the other copy kept sampling every call: ~30 M samples here instead of a few hundred).
// 60 M calls in ~0.2 s; the bound holds for any epoch count below 30,000.
TEST(ProfileInlinedCopies, AllCopiesSwitchOff) {
  const Outcome r = crossmod("inline", std::string("--quiet --policy paper -- ") + PROF_INLINE_CYG + " 30000000");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto t = truth(r.out);
  const json j = report(r);
  const json* hot = function(j, "(anonymous namespace)::hot(unsigned int)");
  ASSERT_NE(hot, nullptr);
  EXPECT_LE((*hot)["calls_observed"].get<unsigned long>(), t.at("hot"));
  EXPECT_LT((*hot)["samples"].get<unsigned long>(), t.at("hot") / 200) << "a copy's probe stayed on";
}

// Every copy's probes switch on again, not only the last found: caller_b's copy is found
// last, then caller_a runs alone. When the runtime kept one probe per function and kind,
// caller_a's copy went off at its function's first switch-off and stayed off (10
// samples of 100 M calls), and on kvpipe_cyg an entry copy whose exit copy was not the kept
// one left its frames behind (47 dropped under paper). ~0.25 s at 2 ms epochs: ~100 epochs
// of 10 samples; 300 is a third of the first 100 epochs.
TEST(ProfileInlinedCopies, EveryCopySwitchesOnAgain) {
  const Outcome r = crossmod("inline-late", std::string("--quiet --policy paper --epoch 2ms -- ") +
                                                PROF_INLINE_CYG + " 100000000 late-a");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto t = truth(r.out);
  const json j = report(r);
  const json* hot = function(j, "(anonymous namespace)::hot(unsigned int)");
  ASSERT_NE(hot, nullptr);
  EXPECT_LE((*hot)["calls_observed"].get<unsigned long>(), t.at("hot"));
  EXPECT_GE((*hot)["samples"].get<unsigned long>(), 300u) << "caller_a's copy stayed off";
  EXPECT_EQ(j["overhead"]["frames_dropped"].get<unsigned long>(), 0u);
}

// A function that inlines an instrumented one: the inlined copy's entry hook runs from the
// caller's own frame, and the cyg shadow stack used to drop the caller's frame there, so
// every exit of caller_a / caller_b came without an entry TSC (no latency at all).
TEST(ProfileInlinedCopies, CallersOfInlinedCopiesKeepTheirLatency) {
  const Outcome r = crossmod("inline-full", std::string("--quiet --policy full -- ") + PROF_INLINE_CYG + " 20000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  for (const char* name : {"(anonymous namespace)::caller_a(unsigned int)", "(anonymous namespace)::caller_b(unsigned int)",
                           "(anonymous namespace)::hot(unsigned int)"}) {
    const json* f = function(j, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ((*f)["exits_without_entry"].get<unsigned long>(), 0u) << name;
    EXPECT_EQ((*f)["samples"].get<unsigned long>() + (*f)["discovery_exits"].get<unsigned long>(),
              (*f)["calls_observed"].get<unsigned long>())
        << name;
    EXPECT_LE((*f)["discovery_exits"].get<unsigned long>(), 3u) << name;  // the first call of each site (inlined copies)
  }
}

// fork without exec: the child's calls land in the parent's (shared) segment; under `full`
// the report's count is exactly both processes' calls.
TEST(ProfileFork, ChildCountsAddUp) {
  for (const char* prog : {PROF_MT_CYG, PROF_MT_PFE}) {
    const Outcome r = crossmod("fork", std::string("--quiet --policy full -- ") + prog + " 2 3000 fork");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto t = truth(r.out);
    const json j = report(r);
    EXPECT_EQ(j["exit"]["execs"], 0);
    EXPECT_EQ(j["exit"]["forks"], 1) << prog;
    EXPECT_FALSE(has_note(j, "forked without an exec")) << j["notes"].dump();  // its own segment
    const json* f = function(j, kLeafA);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), t.at("leaf_a")) << prog;
  }
}

// The child of glibc's fork gets a segment and a daemon of its own: its threads are in
// that segment (per-thread rows of another segment than the parent's 0), and under paper
// its functions switch on again epoch after epoch (a child without a daemon gave at most
// --samples per function: ~40 here). Before, it shared the parent's segment and had no
// daemon. Counts by segment and state, no time threshold: the child runs ~0.3 s, hundreds
// of 1 ms epochs, for 60 samples.
TEST(ProfileFork, ForkedChildHasItsOwnSegmentAndDaemon) {
  const Outcome r = crossmod("fork-own", std::string("--quiet --policy paper --epoch 1ms -- ") +
                                             PROF_MT_CYG + " 2 3000000 fork");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  EXPECT_EQ(j["exit"]["execs"], 0);
  EXPECT_EQ(j["exit"]["forks"], 1);
  EXPECT_FALSE(has_note(j, "forked without an exec")) << j["notes"].dump();
  std::uint64_t parent = 0, child = 0;
  bool found = false;
  for (const json& m : j["metrics"]) {
    if (m["name"] != "per_thread") continue;
    found = true;
    for (const json& row : m["rows"])
      (row["segment"].get<int>() == 0 ? parent : child) += row["samples"].get<std::uint64_t>();
  }
  ASSERT_TRUE(found) << j["metrics"].dump();
  EXPECT_GT(parent, 0u);
  EXPECT_GT(child, 60u) << "parent " << parent;
}

// A fork while another thread discovers functions (each first call of a cyg function:
// on_found takes the runtime's mutex) must leave the child a free mutex: the child's own
// first call of a function (step_999, never called in the parent) takes it again. Before
// the runtime's fork handler held it across the fork, 3 of 5 runs had a child stuck
// there for good (prof_many kills it after 10 s and exits 1); a run has 3-5 forks during
// the ~1,000 discoveries, so three runs.
TEST(ProfileFork, ChildDiscoversWhileAnotherThreadWasDiscovering) {
  for (int run = 0; run < 3; ++run) {
    const Outcome r = crossmod("fork-discover", std::string("--quiet --policy paper -- ") +
                                                    PROF_MANY_CYG + " 1 1000 fork");
    ASSERT_EQ(r.status, 0) << "run " << run << ": " << r.out << r.err;
    unsigned forks = 0, stuck = 1;
    ASSERT_EQ(std::sscanf(r.out.c_str(), "forks %u stuck %u", &forks, &stuck), 2) << r.out;
    EXPECT_EQ(stuck, 0u);
    const json j = report(r);
    EXPECT_EQ(j["exit"]["forks"].get<unsigned>(), forks) << r.out;
  }
}

// A child runs code before fork's child handlers: glibc's _Fork returns into it, then
// _IO_list_resetlock. Traced, their probes read the perf page of the forking thread, which
// the kernel does not copy into the child: every such child died of SIGSEGV (bash under
// --trace '*' did). The pattern takes _Fork and the pthread_* functions (main's
// pthread_create registers it early, and the threads' ~0.1 s of work before the fork give
// the daemon ~10 ticks to attach its page); prof_mt exits 1 when its child did not exit 0.
TEST(ProfileFork, TracedForkKeepsTheChildAlive) {
  const Outcome r = crossmod("fork-traced", std::string("--quiet --policy full --trace '[_p][Ft]*' -- ") + PROF_MT_PLAIN +
                                                " 2 1000000 fork");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  ASSERT_NE(function(j, "_Fork"), nullptr) << j["notes"].dump();
  EXPECT_EQ(j["run"]["switch_detection"], "perf");
}

// prof_mt's child made by `how` (no atfork handler runs in it) lives and counts exactly,
// for both compiler-assisted providers; `perf`: the report says switches were detected.
void expect_child_alive(const std::string& tag, const std::string& how, bool perf) {
  for (const char* prog : {PROF_MT_CYG, PROF_MT_PFE}) {
    const Outcome r = crossmod(tag, std::string("--quiet --policy full -- ") + prog + " 2 1000000 " + how);
    ASSERT_EQ(r.status, 0) << prog << " " << r.err;
    const auto t = truth(r.out);
    const json j = report(r);
    const json* f = function(j, kLeafA);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), t.at("leaf_a")) << prog;
    EXPECT_EQ(j["exit"]["forks"], 1) << prog << " " << how;
    EXPECT_TRUE(has_note(j, "forked without an exec")) << j["notes"].dump();  // shared the parent's
    if (perf) {
      EXPECT_EQ(j["run"]["switch_detection"], "perf");
    }
  }
}

// A program's own _Fork runs no atfork handler: the runtime wraps it, or the child's first
// sample reads the parent's perf page (not copied into the child) and dies of SIGSEGV.
// Main registers at its warm-up calls, so the daemon attaches its page during the threads'
// ~0.1 s; in the child main makes every call and its first sample loads that page.
TEST(ProfileFork, OwnForkWithoutHandlersKeepsTheChildAlive) { expect_child_alive("fork-raw", "_Fork", false); }

// The same through glibc's clone without CLONE_VM (a copy of the address space, no atfork
// handler): the runtime's clone makes the child forget the perf pages before the program's
// function runs (before it, the child died of SIGSEGV and prof_mt exited 1).
TEST(ProfileFork, CloneWithoutSharedMemoryKeepsTheChildAlive) { expect_child_alive("clone-copy", "clone", true); }

// Compensation: every inner() hit inside a sampled outer() call is accounted as
// instrumentation time (at least its calibrated fixed cost plus one tick of the probe
// function's own rdtsc pair), and taken off outer's duration: per call, raw - compensated
// >= 2 hits x 20 calls. An empty-ish inner() measures less after compensation than before.
// Exact relations between counters, no time threshold.
TEST(ProfileCompensation, NestedHitsComeOff) {
  const Outcome r = crossmod("nest-full", std::string("--quiet --policy full -- ") + PROF_NEST_CYG);
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* outer = function(j, "(anonymous namespace)::outer(unsigned long)");
  const json* inner = function(j, "(anonymous namespace)::inner(unsigned long)");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  // The first call discovers outer's and inner's sites: not sampled (discovery_exits).
  ASSERT_EQ((*outer)["samples"].get<unsigned long>(), 1999u);
  EXPECT_EQ((*outer)["discovery_exits"].get<unsigned long>(), 1u);
  EXPECT_EQ((*outer)["uncompensated_samples"].get<unsigned long>(), 0u);
  EXPECT_GE((*outer)["raw_mean_ticks"].get<double>() - (*outer)["mean_ticks"].get<double>(), 40.0);
  EXPECT_LT((*inner)["mean_ticks"].get<double>(), (*inner)["raw_mean_ticks"].get<double>());
  EXPECT_TRUE(j["overhead"]["self_ticks"]["cyg"].is_number_integer()) << "the cyg calibration site was not timed";
  EXPECT_TRUE(j["overhead"]["nest_ticks"]["cyg"].is_number_integer()) << "no nested-call remainder for cyg";
  // No patchable function in this program: that provider is not calibrated (null).
  EXPECT_TRUE(j["overhead"]["self_ticks"]["patchable"].is_null());
  EXPECT_TRUE(j["overhead"]["nest_ticks"]["patchable"].is_null());
  EXPECT_TRUE(j["overhead"]["self_ticks"]["tracepoint"].is_null());  // no --trace
}

// A budget switch-off at an entry hit takes that call's exit probe off too, so its exit
// never comes. Its frame used to stay on the thread's stack of sampled calls under the
// later ones (only an older call's exit clears it); under a caller that runs the whole time
// (here longrun, untraced; sqlite3's sqlite3VdbeExec, python3's eval loop) they piled up,
// filled the stack, and every later sample was timed raw: 263,404 of inner's 355,107 samples
// in a run before the fix, and sqlite3's and python3's means under `budget` 7-15 times
// their `paper` and `full` means. A 2 ms period whose budget inner spends every time gives
// ~400 budget switch-offs in a second, about half at an entry hit. (With 5% of 1 ms
// periods the daemon's own wakes, ~60 us of CPU each here, took the whole budget in 1 run
// of 12: 2 switch-offs.)
TEST(ProfileCompensation, BudgetSwitchOffsAtAnEntryLeaveNoFrameBehind) {
  const Outcome r = crossmod(
      "nest-budget-long",
      std::string("--quiet --policy budget --samples 1000000 --budget 20% --period 2ms --epoch 2ms "
                  "--trace '*inner*' -- ") +
          PROF_NEST_PLAIN + " long 1000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* inner = function(j, "(anonymous namespace)::inner(unsigned long)");
  ASSERT_NE(inner, nullptr);
  ASSERT_GE(j["overhead"]["budget_offs"].get<unsigned long>(), 100u)
      << "too few switch-offs to fill 64 frames";
  const unsigned long samples = (*inner)["samples"], raw = (*inner)["uncompensated_samples"];
  ASSERT_GE(samples, 1000u);
  // Before: 263,404 of 355,107 raw, and 300,774 of 423,392. Now none in most runs, at most 117 of
  // ~390,000 in 12 (not explained: no frame dropped, no toggle failure).
  EXPECT_LE(raw * 100, samples) << raw << " of " << samples << " samples uncompensated";
  EXPECT_EQ(j["overhead"]["frames_dropped"].get<unsigned long>(), 0u);
}

// More sampled calls in flight than a thread's 64 frames: the oldest frames are dropped
// (their calls are timed raw), the innermost calls keep theirs. Before, frames beyond the
// 64th were not pushed, so the innermost calls, the most frequent, all went raw.
TEST(ProfileCompensation, DeepStacksDropTheOldestFrames) {
  const Outcome r =
      crossmod("nest-deep", std::string("--quiet --policy full --trace '*inner*' -- ") +
                                PROF_NEST_PLAIN + " deep 100 1000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* inner = function(j, "(anonymous namespace)::inner(unsigned long)");
  const json* deep = function(j, "(anonymous namespace)::deep_inner(unsigned int, unsigned int)");
  ASSERT_NE(inner, nullptr);
  ASSERT_NE(deep, nullptr);
  EXPECT_EQ((*inner)["samples"].get<unsigned long>(), 1000u);
  EXPECT_EQ((*inner)["uncompensated_samples"].get<unsigned long>(), 0u);
  EXPECT_EQ((*deep)["samples"].get<unsigned long>(), 101u);
  // 101 deep_inner frames and inner's: the 38 oldest deep_inner calls lose theirs.
  const unsigned long dropped = j["overhead"]["frames_dropped"];
  EXPECT_EQ(dropped, 101u + 1u - 64u);
  EXPECT_EQ((*deep)["uncompensated_samples"].get<unsigned long>(), dropped);
  EXPECT_FALSE(has_note(j, "timed raw")) << "38 of 1,101 samples raw: under the note's 5%";
}

// A recursion whose function goes off (its sample quota) while 50-odd of its calls are in
// flight: their exits never come. Their frames used to stay until an older call's exit,
// which never comes here (main is not traced): the recursions of later epochs piled
// theirs on top and the ring dropped frames all run. Now an entry drops the newest frames
// whose function is off or was switched on again since they began.
TEST(ProfileCompensation, FramesOfCallsSwitchedOffInFlightGo) {
  const Outcome r = crossmod("nest-deep-repeat", std::string("--quiet --policy paper --samples 5 --epoch 1ms "
                                                             "--trace '*inner*' -- ") +
                                                     PROF_NEST_PLAIN + " deep 60 10 200000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* deep = function(j, "(anonymous namespace)::deep_inner(unsigned int, unsigned int)");
  ASSERT_NE(deep, nullptr);
  ASSERT_GE((*deep)["toggles"].get<unsigned long>(), 20u) << "too few switch-offs";
  EXPECT_EQ(j["overhead"]["frames_dropped"].get<unsigned long>(), 0u);
  EXPECT_EQ((*deep)["uncompensated_samples"].get<unsigned long>(), 0u);
}

// A call that starts while its function is being switched off (entry probes off, exit
// probes not yet) is timed by the layer but not counted: its exit is no sample. The
// switching thread, preempted there, made such windows milliseconds long (latency_lab's
// lab_leaf_5k in an evaluation run: 2,768 of 270 calls seen, 2,505 raw); the test knob
// sleeps 1 ms there. Before the fix (8 x 2,000,000 calls, 3 ms): leaf_a 2,833,387 samples of 82,603
// calls, 2,751,053 raw. (patchable: its entry site stays live while the exit is on.)
TEST(ProfileCompensation, ExitsOfUnseenCallsWhileSwitchingOffAreNoSamples) {
  const Outcome r =
      crossmod("off-stall",
               std::string("--quiet --policy paper --epoch 2ms -- ") + PROF_MT_PFE + " 8 200000",
               true, "CROSSMOD_PROFILE_TEST_OFF_STALL_US=1000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  for (const char* name : {kLeafA, "(anonymous namespace)::leaf_b(unsigned int)"}) {
    const json* f = function(j, name);
    ASSERT_NE(f, nullptr) << name;
    const unsigned long samples = (*f)["samples"], calls = (*f)["calls_observed"];
    const unsigned long raw = (*f)["uncompensated_samples"];
    EXPECT_GT(samples, 0u) << name;
    EXPECT_LE(samples, calls + calls / 100) << name;
    EXPECT_LE(raw * 100, samples) << name;
  }
}

// Many raw samples (here 58 of 621, the recursion's oldest frames) get a note: the means
// include probe costs, which the table does not show. (Under the probes layer's 128
// redirected returns per thread: deeper calls get no exit at all.)
TEST(ProfileCompensation, ManyRawSamplesGetANote) {
  const Outcome r =
      crossmod("nest-deeper", std::string("--quiet --policy full --trace '*inner*' -- ") +
                                  PROF_NEST_PLAIN + " deep 120 500");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  EXPECT_EQ(j["overhead"]["frames_dropped"].get<unsigned long>(), 121u + 1u - 64u);
  EXPECT_TRUE(has_note(j, "58 of 621 samples (9.3%) were timed raw")) << j["notes"].dump();
}

// Context switches: napper() sleeps in every call, so each of its samples that the thread's
// perf page covered is a switched sample, and none is on-CPU. Skipped where the kernel
// refuses perf_event_open (the report says so).
TEST(ProfileSwitches, SleepingCallsAreSwitched) {
  const Outcome r = crossmod("nest-switch", std::string("--quiet --policy full -- ") + PROF_NEST_CYG);
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const std::string how = j["run"]["switch_detection"];
  if (how != "perf") GTEST_SKIP() << how;
  const json* napper = function(j, "(anonymous namespace)::napper()");
  ASSERT_NE(napper, nullptr);
  const unsigned long samples = (*napper)["samples"], sw = (*napper)["switched_samples"],
                      unknown = (*napper)["unknown_switch_samples"], cold = (*napper)["cold_samples"];
  EXPECT_EQ(samples + (*napper)["discovery_exits"].get<unsigned long>(), 200u);
  EXPECT_EQ(sw + unknown + cold, samples);  // a cold sample is not in the switch split
  EXPECT_GT(sw, 0u) << "no thread page in 200 ms";
  EXPECT_EQ((*napper)["oncpu_samples"].get<unsigned long>(), 0u);
  EXPECT_TRUE((*napper)["oncpu_mean_ticks"].is_null());
}

// fork after the threads got their perf pages: the child must not read its parent's pages
// (not inherited: VM_DONTCOPY); it died of SIGSEGV at its first sample before the fix.
TEST(ProfileSwitches, ForkedChildDoesNotReadItsParentsPages) {
  const Outcome r = crossmod("nest-fork", std::string("--quiet --policy full -- ") + PROF_NEST_CYG + " fork");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("child 0\n"), std::string::npos) << r.out;
  const json j = report(r);
  const json* outer = function(j, "(anonymous namespace)::outer(unsigned long)");
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ((*outer)["calls_observed"].get<unsigned long>(), 2100u);  // parent and child share the segment
}

// Without perf pages (CROSSMOD_PROFILE_NO_SWITCHES, as where perf_event_open is refused)
// the report says why and leaves the switch split null; the means are still there.
TEST(ProfileSwitches, OffGivesNullsAndSaysWhy) {
  const Outcome r = crossmod("nest-noswitch", std::string("--quiet --policy full -- ") + PROF_NEST_CYG, true,
                             "CROSSMOD_PROFILE_NO_SWITCHES=1");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  EXPECT_EQ(j["run"]["switch_detection"], "unavailable: off (CROSSMOD_PROFILE_NO_SWITCHES)");
  const json* napper = function(j, "(anonymous namespace)::napper()");
  ASSERT_NE(napper, nullptr);
  EXPECT_TRUE((*napper)["switched_samples"].is_null());
  EXPECT_TRUE((*napper)["oncpu_mean_ticks"].is_null());
  EXPECT_GT((*napper)["samples"].get<unsigned long>(), 0u);
  EXPECT_TRUE((*napper)["mean_ticks"].is_number());
}

// --trace goes through probes::attach_tracepoints; the report says what it answered in a
// note and the run succeeds (sqlite3/python3 end to end: trace_smoke.sh).
TEST(ProfileTrace, OutcomeIsANote) {
  const Outcome r = crossmod("trace", std::string("--quiet --policy full --trace 'leaf_*' -- ") + PROF_MT_CYG + " 1 100");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  EXPECT_TRUE(has_note(j, "--trace")) << j["notes"].dump();
}

// Why functions were not probed, by reason and object, most frequent first: with '*' the
// dynamic loader's functions are always refused (the SIGTRAP handler's path), and the
// setjmp family in libc keeps no exit probe.
TEST(ProfileTrace, RefusalsAreNotedByReasonAndObject) {
  const Outcome r = crossmod("trace-refusals", std::string("--quiet --policy full --trace '*' -- ") + PROF_MT_PLAIN + " 1 10");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  std::string line;
  for (const json& n : j["notes"])
    if (n.get<std::string>().rfind("--trace refused: ", 0) == 0) line = n.get<std::string>();
  ASSERT_FALSE(line.empty()) << j["notes"].dump();
  EXPECT_NE(line.find(" on the SIGTRAP handler's path (ld-"), std::string::npos) << line;
  EXPECT_NE(line.find(" exit: return address not redirectable (libc.so"), std::string::npos) << line;
  EXPECT_LT(line.size(), 256u);
  // Counts are in descending order.
  unsigned long last = ~0ul;
  for (std::size_t at = std::string("--trace refused:").size(); at < line.size();) {
    const unsigned long n = std::strtoul(line.c_str() + at + 1, nullptr, 10);
    if (n == 0) break;  // the closing "..."
    EXPECT_LE(n, last) << line;
    last = n;
    const std::size_t comma = line.find(", ", at + 1);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
}

// Every image of an exec chain writes its runtime's note; the report keeps each text once
// and names the segments (a shell shim that execs 38 times used to repeat it 38 times).
TEST(ProfileTrace, RepeatedNoteIsOneLineWithItsSegments) {
  const Outcome r = crossmod("trace-exec", "--quiet --policy none --trace 'crossmod_no_such_fn_*' -- /bin/sh -c "
                                           "'exec /bin/sh -c \"exec /bin/true\"'");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  EXPECT_EQ(j["exit"]["execs"].get<int>(), 2) << j["exit"].dump();
  std::vector<std::string> trace_notes;
  for (const json& n : j["notes"])
    if (n.get<std::string>().find("--trace: ") != std::string::npos) trace_notes.push_back(n.get<std::string>());
  ASSERT_EQ(trace_notes.size(), 1u) << j["notes"].dump();
  EXPECT_EQ(trace_notes[0].rfind("segments 0-2: --trace: 0 tracepoint probes", 0), 0u) << trace_notes[0];
}

// --trace calibrates the tracepoint provider (self_ticks / nest_ticks, on the runtime's own
// calibration site) and never traces the runtime's functions, whatever the pattern: they
// run inside the probe functions. '*' traces every other function of the process.
TEST(ProfileTrace, CalibratesTracepointsAndNeverTracesItself) {
  const Outcome r = crossmod("trace-all", std::string("--quiet --policy full --all-functions --trace '*' -- ") + PROF_MT_PLAIN + " 2 1000");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto t = truth(r.out);
  const json j = report(r);
  EXPECT_TRUE(j["overhead"]["self_ticks"]["tracepoint"].is_number_integer()) << j["overhead"].dump();
  EXPECT_TRUE(j["overhead"]["nest_ticks"]["tracepoint"].is_number_integer()) << j["overhead"].dump();
  std::size_t libc = 0;
  for (const json& f : j["functions"]) {
    const std::string object = f["object"];
    EXPECT_EQ(object.find("libcrossmod_profile"), std::string::npos) << f["name"];
    EXPECT_NE(f["name"], "crossmod_profile_calib_target_tp");
    libc += object.find("libc.so") != std::string::npos ? 1 : 0;
  }
  EXPECT_GT(libc, 100u);  // the pattern did reach the other objects
  const json* a = function(j, kLeafA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ((*a)["calls_observed"].get<unsigned long>(), t.at("leaf_a"));  // full: every call
}

// Retraction, on a program where it must happen: leaf_a and leaf_b are called millions of
// times a second for ~1 s (100 epochs), so under paper each switch-on takes its 10 samples
// within microseconds and the function is off and hot at the pass 1/32 tick later. Each
// retraction mode: default (jumps inside one line), 1 (all), 0 (none). The counts never
// exceed the program's own, whatever the jumps did meanwhile. (trace_smoke.sh runs the
// same on sqlite3, where how many functions get hot and off in a pass varies run to run.)
TEST(ProfileTrace, HotFunctionsLoseTheirJumpWhileOff) {
  for (const char* mode : {"", "1", "0"}) {
    const std::string env = *mode != '\0' ? std::string("CROSSMOD_PROFILE_RETRACT=") + mode : "";
    const Outcome r = crossmod(std::string("retract-") + (*mode != '\0' ? mode : "default"),
                               std::string("--quiet --policy paper --trace '*::leaf_[ab](*' -- ") + PROF_MT_PLAIN + " 1 4000000",
                               true, env);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto t = truth(r.out);
    const json j = report(r);
    for (const auto& [name, key] : {std::pair{kLeafA, "leaf_a"}, std::pair{kLeafB, "leaf_b"}}) {
      const json* f = function(j, name);
      ASSERT_NE(f, nullptr) << name << " " << j["notes"].dump();
      EXPECT_EQ((*f)["provider"], "tracepoint");
      EXPECT_GE((*f)["samples"].get<unsigned long>(), 1u) << name;
      EXPECT_LE((*f)["calls_observed"].get<unsigned long>(), t.at(key)) << name;
    }
    const unsigned long retracts = j["overhead"]["retracts"];
    if (std::string(mode) == "0") {
      EXPECT_EQ(retracts, 0u);
    } else {
      EXPECT_GE(retracts, 2u) << "mode '" << mode << "'";  // each leaf at least once
      // millions of calls a second: the passes pay for their wakes (RetractionWakesOnlyWhenItMayPay)
      EXPECT_GE(j["overhead"]["retract_wakes"].get<unsigned long>(), 1u);
    }
    for (const json& n : j["notes"]) EXPECT_EQ(n.get<std::string>().find("toggles failed"), std::string::npos) << n;
  }
}

// The retraction pass is a second wake of the daemon in a tick (~40-65 us of CPU in the KVM
// guests here), and by default it happens only when the detours it would spare may pay for
// it. prof_nest_cyg's napper() calls libc's nanosleep once a millisecond for ~200 ms: under
// paper with one sample per epoch, nanosleep is switched on in nearly every tick and would
// make ~10 calls while off, far from paying; the pass never runs (retract_skips), its jump
// is never removed. With CROSSMOD_PROFILE_RETRACT_WAKE=always (the rule before) each such
// tick wakes twice. The wakes add up: every tick's wake and every pass's (one more when the
// stop comes during a sleep), and their CPU time is part of the daemon's.
TEST(ProfileTrace, RetractionWakesOnlyWhenItMayPay) {
  for (const char* mode : {"cost", "always"}) {
    const bool always = std::string(mode) == "always";
    const Outcome r = crossmod(std::string("retract-wake-") + mode,
                               std::string("--quiet --policy paper --samples 1 --trace nanosleep -- ") + PROF_NEST_CYG,
                               true, always ? "CROSSMOD_PROFILE_RETRACT_WAKE=always" : "");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = report(r);
    const json& o = j["overhead"];
    const auto n = [&](const char* k) { return o[k].get<unsigned long>(); };
    if (always) {
      EXPECT_GE(n("retract_wakes"), 5u) << o.dump();
      EXPECT_EQ(n("retract_skips"), 0u) << o.dump();
    } else {
      EXPECT_GE(n("retract_skips"), 5u) << o.dump();
      EXPECT_EQ(n("retract_wakes"), 0u) << o.dump();
      EXPECT_EQ(n("retracts"), 0u) << o.dump();
    }
    EXPECT_GE(n("wakes"), n("walks") + n("retract_wakes")) << o.dump();
    EXPECT_LE(n("wakes"), n("walks") + n("retract_wakes") + 1) << o.dump();
    EXPECT_GT(o["wake_cpu_s"].get<double>(), 0.0) << o.dump();
    EXPECT_LE(o["wake_cpu_s"].get<double>(), o["daemon_cpu_s"].get<double>()) << o.dump();
  }
}

// converge removes a converged function's jump once, for good: with a wide target both
// leaves converge within ~5 epochs of this ~1 s run (retraction of hot off functions
// disabled, so every removal is a converged one).
TEST(ProfileTrace, ConvergedFunctionsLoseTheirJump) {
  const Outcome r = crossmod("retract-converge",
                             std::string("--quiet --policy converge --ci 100% --trace '*::leaf_[ab](*' -- ") + PROF_MT_PLAIN +
                                 " 1 4000000",
                             true, "CROSSMOD_PROFILE_RETRACT=0");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  for (const char* name : {kLeafA, kLeafB}) {
    const json* f = function(j, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_TRUE((*f)["converged"].get<bool>()) << name;
  }
  // each leaf has one tracepoint, and nothing else is traced
  EXPECT_EQ(j["overhead"]["retracts"].get<unsigned long>(), 2u);
}

// --trace reaches objects loaded after start-up: prof_dlopen loads prof_dl_target with
// dlopen inside main and calls its dlt_work; under full every call is seen and timed. The
// failed dlopen before it keeps its dlerror, the run's output is the plain run's, and the
// note counts the late object; so with libc's dl* functions traced as well. Without --trace
// the same run has no such function.
TEST(ProfileTrace, ObjectsLoadedLaterAreTraced) {
  const std::string args = std::string(PROF_DLOPEN) + " " + PROF_DL_TARGET + " 20000";
  const Outcome r = crossmod("dlopen-full", "--quiet --policy full --trace 'dlt_*' -- " + args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "dlerror kept\ndlt_work 20000\n");
  const json j = report(r);
  const json* f = function(j, "dlt_work");
  ASSERT_NE(f, nullptr) << j["notes"].dump();
  EXPECT_EQ((*f)["provider"], "tracepoint");
  EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), 20000u);
  EXPECT_EQ((*f)["samples"].get<unsigned long>(), 20000u);
  EXPECT_TRUE(has_note(j, "loaded later: 1 objects, 2 probes")) << j["notes"].dump();
  // A sampling policy: samples, and never more calls observed than made.
  const Outcome p = crossmod("dlopen-paper", "--quiet --policy paper --trace 'dlt_*' -- " + args);
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_EQ(p.out, "dlerror kept\ndlt_work 20000\n");
  const json jp = report(p);
  const json* g = function(jp, "dlt_work");
  ASSERT_NE(g, nullptr);
  EXPECT_GE((*g)["samples"].get<unsigned long>(), 1u);
  EXPECT_LE((*g)["calls_observed"].get<unsigned long>(), 20000u);
  // With libc's dl* functions traced too: this runtime's dlopen asks dlsym(RTLD_NEXT) for
  // the real one, which an exit probe on dlsym would answer with this dlopen again.
  const Outcome d = crossmod("dlopen-dl", "--quiet --policy full --trace 'dl*' -- " + args);
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(d.out, "dlerror kept\ndlt_work 20000\n");
  const json jd = report(d);
  ASSERT_NE(function(jd, "dlt_work"), nullptr) << jd["notes"].dump();
  ASSERT_NE(function(jd, "dlsym"), nullptr) << jd["notes"].dump();
  const Outcome n = crossmod("dlopen-none", "--quiet --policy full -- " + args);
  ASSERT_EQ(n.status, 0) << n.err;
  EXPECT_EQ(n.out, "dlerror kept\ndlt_work 20000\n");
  const json jn = report(n);
  EXPECT_EQ(function(jn, "dlt_work"), nullptr);
}

// An object dlmopen put in a namespace of its own is not traced: dl_iterate_phdr, which
// every scan uses, lists the caller's namespace only (glibc). The program runs as without
// the profiler, its dlclose unmaps the object (nothing of ours pinned it), and the report
// names none of its functions.
TEST(ProfileTrace, ObjectsInAnotherNamespaceAreLeftAlone) {
  const std::string args = std::string(PROF_DLMOPEN) + " " + PROF_DL_TARGET + " 2000";
  const Outcome r = crossmod("dlmopen-full", "--quiet --policy full --trace 'dlt_*' -- " + args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "dlt_work 2000\nunmapped\n");
  const json j = report(r);
  EXPECT_EQ(function(j, "dlt_work"), nullptr) << j["notes"].dump();
}

// Two coroutines on stacks of their own switch 2,000 times from inside co_step, whose frame
// stays live (its return redirected) while the other stack runs. Under full every call
// returns through its exit probe: samples equal calls, for patchable entries, cyg hooks and
// tracepoints. Before, the shadow stacks dropped the other stack's records: patchable and
// tracepoint exits aborted ("exit trampoline without a frame"), cyg exits had no entry TSC.
TEST(ProfileExits, CoroutinesOnStacksOfTheirOwnKeepTheirExits) {
  const std::pair<const char*, std::string> runs[] = {{"co-pfe", std::string("-- ") + PROF_CO_PFE},
                                                      {"co-cyg", std::string("-- ") + PROF_CO_CYG},
                                                      {"co-trace", std::string("--trace 'co_*' -- ") + PROF_CO_PLAIN}};
  for (const auto& [tag, args] : runs) {
    const Outcome r = crossmod(tag, "--quiet --policy full " + args + " 2000");
    ASSERT_EQ(r.status, 0) << tag << " " << r.err;
    EXPECT_EQ(r.out, "co_work 8002\n") << tag;
    const json j = report(r);
    for (const char* name : {"co_work", "co_step", "co_body", "co_driver"}) {
      const json* f = function(j, name);
      ASSERT_NE(f, nullptr) << tag << " " << name << " " << j["notes"].dump();
      // cyg: a call in flight while a site is discovered (the first call of each) is not
      // sampled (discovery_exits); 0 for the other providers.
      EXPECT_EQ((*f)["samples"].get<unsigned long>() + (*f)["discovery_exits"].get<unsigned long>(),
                (*f)["calls_observed"].get<unsigned long>())
          << tag << " " << name;
    }
    EXPECT_EQ((*function(j, "co_work"))["calls_observed"].get<unsigned long>(), 8002u) << tag;
  }
}

// The same with an exception thrown and caught on the upper stack every 10th round while
// the lower one waits inside co_step: the unwinder's interposer writes back the return
// addresses of this stack's frames and used to drop every record, the other stack's too,
// whose co_step then returned to no record. Under full the frames live at a throw return
// without their exit probe (co_throw, co_middle, co_body); the lower stack's keep theirs.
TEST(ProfileExits, ExceptionsOnOneStackLeaveTheOtherStacksExits) {
  const std::pair<const char*, std::string> runs[] = {{"co-throw-pfe", std::string("-- ") + PROF_CO_PFE},
                                                      {"co-throw-trace", std::string("--trace 'co_*' -- ") + PROF_CO_PLAIN}};
  for (const auto& [tag, args] : runs) {
    const Outcome r = crossmod(tag, "--quiet --policy full " + args + " 2000 throw");
    ASSERT_EQ(r.status, 0) << tag << " " << r.err;
    EXPECT_EQ(r.out, "co_work 8202\ncaught 200\n") << tag;
    const json j = report(r);
    for (const char* name : {"co_work", "co_step", "co_driver"}) {
      const json* f = function(j, name);
      ASSERT_NE(f, nullptr) << tag << " " << name << " " << j["notes"].dump();
      EXPECT_EQ((*f)["samples"].get<unsigned long>(), (*f)["calls_observed"].get<unsigned long>()) << tag << " " << name;
    }
    const json* t = function(j, "co_throw");
    ASSERT_NE(t, nullptr) << tag;
    EXPECT_EQ((*t)["calls_observed"].get<unsigned long>(), 200u) << tag;
    EXPECT_EQ((*t)["samples"].get<unsigned long>(), 0u) << tag;
  }
}

// The program's own output alone (stdout), for outputs that depend on the machine.
std::string plain_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    pclose(p);
  }
  return out;
}

// Stack walks from inside probed frames find what they find without the profiler: glibc's
// backtrace() (traced itself under '*') and libgcc's _Unwind_Backtrace. They stopped at the
// first redirected return (0 frames instead of 11 under full) before the probes layer
// wrote the thread's frames back first.
TEST(ProfileExits, StackWalksSeeEveryFrame) {
  const std::pair<std::string, std::string> runs[] = {
      {"bt-trace", std::string("--trace '*' -- ") + PROF_BT_PLAIN + " 50"},
      {"bt-pfe", std::string("-- ") + PROF_BT_PFE + " 50"}};
  for (const auto& [tag, args] : runs) {
    const std::string want = plain_output(args.substr(args.find("-- ") + 3));
    ASSERT_NE(want.find("backtrace "), std::string::npos) << want;
    for (const char* policy : {"full", "paper"}) {
      const Outcome r = crossmod(tag + "-" + policy, std::string("--quiet --policy ") + policy + " " + args);
      ASSERT_EQ(r.status, 0) << tag << " " << policy << " " << r.err;
      EXPECT_EQ(r.out, want) << tag << " " << policy;
    }
  }
}

// A program that embeds V8 (recognised by the name of V8's entry point): every tracepoint
// has its entry probe only, so calls are counted and nothing is timed, and the note says
// why. Without it the same program's leaf gets samples (the control).
TEST(ProfileTrace, ProgramsHostingV8GetEntryProbesOnly) {
  const Outcome r = crossmod("v8host", std::string("--quiet --policy full --trace 'v8h_*' -- ") + PROF_V8HOST + " 5000");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "v8h_leaf 5000\n");
  const json j = report(r);
  const json* f = function(j, "v8h_leaf");
  ASSERT_NE(f, nullptr) << j["notes"].dump();
  EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), 5000u);
  EXPECT_EQ((*f)["samples"].get<unsigned long>(), 0u);
  EXPECT_FALSE((*f)["exit_probe"].get<bool>());
  EXPECT_TRUE(has_note(j, "exit: V8 reads return addresses (")) << j["notes"].dump();
  const Outcome c = crossmod("v8host-control", std::string("--quiet --policy full --trace 'v8h_*' -- ") + PROF_MT_PLAIN +
                                                   " 1 1000");
  ASSERT_EQ(c.status, 0) << c.err;
  for (const json& n : report(c)["notes"])
    EXPECT_EQ(n.get<std::string>().find("V8"), std::string::npos) << n.get<std::string>();
}

// A function of an object loaded 200 ms into the run, called 20,000 times in a burst
// shorter than an epoch: under paper its one window (10 calls, then off) gives the rate
// for the rest of the burst. That window used to open at the process's start, so its 10
// calls were spread over the 200 ms and the estimate came to ~10 calls; it opens at the
// load now. (The estimate is still low, by the probes' unaccounted cost in a tight loop:
// calls_estimated in profiler/README.md; 700-ish of 20,000 here, and > 60 is all this checks.)
TEST(ProfileTrace, LateObjectsWindowsOpenWhenLoaded) {
  const Outcome r = crossmod("dlopen-late-window", std::string("--quiet --policy paper --trace 'dlt_*' -- ") + PROF_DLOPEN +
                                                       " " + PROF_DL_TARGET + " 20000 200");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "dlerror kept\ndlt_work 20000\n");
  const json j = report(r);
  const json* f = function(j, "dlt_work");
  ASSERT_NE(f, nullptr) << j["notes"].dump();
  EXPECT_LE((*f)["calls_observed"].get<unsigned long>(), 20000u);
  EXPECT_GT((*f)["calls_estimated"].get<double>(), 60.0) << f->dump();
}

// The runtime's own calls of traced functions are not the program's: neither the attach
// after a dlopen (fnmatch on the new object's symbols: 11 calls counted before) nor the
// daemon thread (clock_nanosleep every tick: ~100 a second before). Neither program calls
// either function itself (--all-functions: so that they are listed with their 0 calls).
TEST(ProfileTrace, TheRuntimesOwnCallsAreNotCounted) {
  const Outcome r = crossmod("quiet-dlopen", std::string("--quiet --policy full --all-functions --trace 'fnmatch' -- ") + PROF_DLOPEN +
                                                 " " + PROF_DL_TARGET + " 100");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* f = function(j, "fnmatch");
  ASSERT_NE(f, nullptr) << j["notes"].dump();
  EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), 0u);
  const Outcome d = crossmod("quiet-daemon", std::string("--quiet --policy paper --all-functions --trace 'clock_nanosleep' -- ") +
                                                 PROF_MT_PLAIN + " 1 2000000");
  ASSERT_EQ(d.status, 0) << d.err;
  const json k = report(d);
  const json* g = function(k, "clock_nanosleep");
  ASSERT_NE(g, nullptr) << k["notes"].dump();
  EXPECT_GT(k["overhead"]["daemon_cpu_s"].get<double>(), 0.0);
  EXPECT_EQ((*g)["calls_observed"].get<unsigned long>(), 0u);
}

// A process that loads libjvm (a library exporting JNI_CreateJavaVM, loaded with
// RTLD_GLOBAL as the java launcher does): HotSpot finds a VM function's Java caller through
// the function's return address, and java died of SIGSEGV in frame::sender under --trace
// '*' once libjvm's functions had exit probes. From the load on, tracepoints get entry
// probes only: the library's function has its calls and no samples, with the refusal
// reason in the notes; the executable's own function, attached before the load, keeps
// its exit probe and its samples, all compensated: the entry-only calls push no frame
// (they used to, and 64 of them filled the thread's frames, so that the 5,000 calls of
// jvh_own after them had uncompensated samples).
TEST(ProfileTrace, ProgramsLoadingHotSpotGetEntryProbesOnly) {
  const Outcome r = crossmod("jvmhost", std::string("--quiet --policy full --trace 'jvh_*' -- ") + PROF_JVMHOST + " " +
                                            PROF_JVMHOST_LIB + " 5000");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "jvh_own 10000\njvh_leaf 5000\n");
  const json j = report(r);
  const json* leaf = function(j, "jvh_leaf");
  const json* own = function(j, "jvh_own");
  ASSERT_NE(leaf, nullptr) << j["notes"].dump();
  ASSERT_NE(own, nullptr) << j["notes"].dump();
  EXPECT_EQ((*leaf)["calls_observed"].get<unsigned long>(), 5000u);
  EXPECT_EQ((*leaf)["samples"].get<unsigned long>(), 0u);
  EXPECT_FALSE((*leaf)["exit_probe"].get<bool>());
  EXPECT_EQ((*own)["samples"].get<unsigned long>(), 10000u);
  EXPECT_EQ((*own)["uncompensated_samples"].get<unsigned long>(), 0u);
  EXPECT_TRUE(has_note(j, "exit: HotSpot reads return addresses (")) << j["notes"].dump();
}

// A function with entry probes only counts its entries toward the epoch's quota
// (--samples) under the sampling policies, as others count their samples: it used to stay
// on for whole epochs, every call a hit (prof_jvmhost's jvh_leaf under paper: all 2,000,000
// calls observed). Now it switches off after --samples calls and the daemon brings it back
// each epoch: a run of ~20-100 epochs observes a small part of the calls.
TEST(ProfileTrace, EntryOnlyFunctionsKeepTheQuota) {
  const Outcome r = crossmod("jvmhost-paper", std::string("--quiet --policy paper --trace 'jvh_*' -- ") + PROF_JVMHOST +
                                                  " " + PROF_JVMHOST_LIB + " 2000000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* leaf = function(j, "jvh_leaf");
  ASSERT_NE(leaf, nullptr) << j["notes"].dump();
  EXPECT_FALSE((*leaf)["exit_probe"].get<bool>());
  EXPECT_GT((*leaf)["calls_observed"].get<unsigned long>(), 0u);
  EXPECT_LT((*leaf)["calls_observed"].get<unsigned long>(), 200000u);
}

// Debian's node (V8), when installed: under --trace '*' it used to abort (V8 found the exit
// trampoline's address where it looked for a return address). Now it runs and prints what
// it prints alone.
TEST(ProfileTrace, NodeRunsUnderTraceEverything) {
  if (!std::filesystem::exists("/usr/bin/node")) GTEST_SKIP() << "/usr/bin/node is not installed";
  const std::string script = "'let s = 0; for (let i = 0; i < 300000; i++) s += Math.sqrt(i); console.log(s.toFixed(2))'";
  for (const char* policy : {"full", "budget"}) {
    const Outcome r = crossmod(std::string("node-") + policy,
                               std::string("--quiet --policy ") + policy + " --trace '*' -- /usr/bin/node -e " + script);
    ASSERT_EQ(r.status, 0) << policy << " " << r.err;
    EXPECT_EQ(r.out, "109544237.43\n") << policy;
  }
}

// A function of a non-PIE program whose jump at its entry has no place (a boundary at 1
// and one at 4: see pushes_prog.cpp) is traced after its `push`, entry and exit probes,
// exact under full (refused before: absent from the report), and sampled under paper.
TEST(ProfileTrace, FunctionsAfterTheirLeadingPushes) {
  const std::string args = std::string(PROF_PUSHES) + " 20000";
  for (const char* policy : {"full", "paper"}) {
    const Outcome r = crossmod(std::string("pushes-") + policy,
                               std::string("--quiet --policy ") + policy + " --trace 'pushes_*' -- " + args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "pushes_add 20000 200010000\n");
    const json j = report(r);
    const json* f = function(j, "pushes_add");
    ASSERT_NE(f, nullptr) << j["notes"].dump();
    EXPECT_EQ((*f)["provider"], "tracepoint");
    if (std::string(policy) == "full") {
      EXPECT_EQ((*f)["calls_observed"].get<unsigned long>(), 20000u);
      EXPECT_EQ((*f)["samples"].get<unsigned long>(), 20000u);
    } else {
      EXPECT_GE((*f)["samples"].get<unsigned long>(), 1u);
      EXPECT_LE((*f)["calls_observed"].get<unsigned long>(), 20000u);
    }
  }
}

// `crossmod trace` follows dlopen like the profiler, both drivers: the probes library
// preloaded on its own (--latency: entry and exit tracepoints, calls counted and timed)
// and crossmod-trace's (entry tracepoints counting). The loaded library's function gets
// its tracepoints, on, and every call is counted. (Here for prof_dlopen and its library.)
TEST(TraceCommand, FollowsObjectsLoadedLater) {
  for (const std::string mode : {"--latency", ""}) {
    const fs::path dir = fresh_dir("trace-dlopen" + mode);
    fs::create_directories(dir);
    const fs::path table = dir / "table.txt", out = dir / "stdout";
    const std::string cmd = std::string(CROSSMOD_BIN) + " trace " + mode + " --functions 'dlt_*' --out " +
                            table.string() + " -- " + PROF_DLOPEN + " " + PROF_DL_TARGET + " 20000 >" + out.string() +
                            " 2>/dev/null";
    const int st = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << mode << " " << st;
    EXPECT_EQ(slurp(out), "dlerror kept\ndlt_work 20000\n") << mode;
    const std::string t = slurp(table);
    std::istringstream lines(t);
    std::string line;
    bool found = false;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string calls, kind, name, object, exits;
      if (!(f >> calls >> kind >> name >> object) || name != "dlt_work") continue;
      found = true;
      EXPECT_EQ(calls, "20000") << line;
      EXPECT_EQ(kind, "jump") << line;
      if (!mode.empty()) {
        ASSERT_TRUE(static_cast<bool>(f >> exits)) << line;
        EXPECT_EQ(exits, "20000") << line;
      }
    }
    EXPECT_TRUE(found) << mode << "\n" << t;
  }
}

// Under budget all of the daemon's CPU time is instrumentation time: from the thread's start
// (its set-up) to its end (the work after the last wake's settling). With a --trace pattern
// that matches nothing no probe hit is charged, so the report's instr_ticks is the daemon's
// charge alone and must hold its whole CPU time (a rounding of < 1 tick per settling and
// the float conversion aside: 0.1%). Without the set-up's charge it fails by 0.5-1 M of
// ~3.9 M ticks (three runs); the last tick's charge is seldom more than a few ticks, so
// this test does not see it missing.
TEST(ProfileBudget, DaemonCpuIsChargedWhole) {
  const Outcome r =
      crossmod("budget-daemon", std::string("--quiet --policy budget --trace 'no_such_function_*' -- ") + PROF_MT_PLAIN + " 1 2000000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const double daemon_ticks = j["overhead"]["daemon_cpu_s"].get<double>() * j["run"]["tsc_hz"].get<double>();
  ASSERT_GT(daemon_ticks, 0.0) << j["overhead"].dump();
  EXPECT_GE(j["overhead"]["instr_ticks"].get<double>(), daemon_ticks * 0.999) << j["overhead"].dump();
}

// The runtime's set-up (its constructor's scan, --trace attach and calibration) is the
// instrumentation's time, and under budget a debt that later periods repay, each with up
// to half of what its cap leaves. `--trace '*'` on prof_mt_plain attaches ~7,000 functions of libc
// and libstdc++: 60-100 ms of set-up here, 20-30% of the run's CPU time, far more than a
// 5% budget's halves repay in the run (one run: 5.9 of 66.6 ms). Sampling goes on with the
// other halves (481 samples in that run, 563 with no repayment, 7 with the debt charged
// whole at once). Under paper, with no budget, the set-up is reported and not repaid.
TEST(ProfileBudget, SetupIsRepaidFromHalfTheBudget) {
  for (const char* policy : {"budget", "paper"}) {
    const Outcome r = crossmod(std::string("setup-") + policy,
                               std::string("--quiet --policy ") + policy + " --trace '*' -- " + PROF_MT_PLAIN + " 1 2000000");
    ASSERT_EQ(r.status, 0) << policy << "\n" << r.err;
    const json j = report(r);
    const json& o = j["overhead"];
    const double setup_s = o["setup_s"].get<double>(), cpu_s = j["run"]["cpu_s"].get<double>();
    const double repaid_s = o["setup_repaid_s"].get<double>();
    ASSERT_GT(setup_s, 0.0) << policy << "\n" << o.dump();
    EXPECT_DOUBLE_EQ(o["setup_share"].get<double>(), setup_s / cpu_s) << policy;
    // In the instrumentation's time, under every policy.
    EXPECT_GE(o["instr_ticks"].get<double>(), 0.999 * setup_s * j["run"]["tsc_hz"].get<double>()) << policy << "\n" << o.dump();
    double with_calls = 0;
    for (const json& f : j["functions"])
      if (f["calls_observed"].get<double>() > 0) ++with_calls;
    ASSERT_GT(with_calls, 0.0) << policy;
    if (std::string(policy) == "budget") {
      // The premise: a debt larger than what half of a 5% budget can repay in the run.
      ASSERT_GE(o["setup_share"].get<double>(), 0.1) << o.dump();
      EXPECT_GT(repaid_s, 0.0) << o.dump();
      // Half of each period's cap, 5% of the CPU time the process had in the period
      // before: at most 2.5% of the run's (1% for the clocks' conversions).
      EXPECT_LE(repaid_s, 0.025 * cpu_s * 1.01) << o.dump();
      EXPECT_LT(repaid_s, setup_s) << o.dump();
      EXPECT_GT(o["samples"].get<double>(), with_calls) << o.dump();
      EXPECT_TRUE(has_note(j, "the runtime's set-up (scan, --trace attach, calibration) took")) << j["notes"].dump();
    } else {
      EXPECT_EQ(repaid_s, 0.0) << o.dump();
      EXPECT_GT(o["samples"].get<double>(), 4 * with_calls) << o.dump();
      EXPECT_FALSE(has_note(j, "the runtime's set-up")) << j["notes"].dump();
    }
  }
}

// A hit is charged its measured probe-function time, calib_ticks, and half of its
// provider's nest_ticks (what a call adds to its caller beyond its two hits' charge, as
// calibrated at start-up): the part of its cost outside both (for tracepoints the
// trampoline and the redirected return: nest_ticks 113 on python3, against 60 for
// calib_ticks). Under full every call of prof_mt_pfe's functions is two hits, so the
// report's extra_ticks is exactly that half times twice the calls observed.
TEST(ProfileBudget, HitsAreChargedTheirNestShare) {
  const Outcome r = crossmod("extra-pfe", std::string("--quiet --policy full -- ") + PROF_MT_PFE + " 2 20000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json& o = j["overhead"];
  ASSERT_TRUE(o["nest_ticks"]["patchable"].is_number_integer()) << o.dump();
  const long nest = o["nest_ticks"]["patchable"].get<long>();
  const unsigned long per_hit = nest > 0 ? static_cast<unsigned long>(nest) / 2 : 0;
  unsigned long calls = 0;
  for (const json& f : j["functions"]) {
    ASSERT_EQ(f["provider"], "patchable") << f.dump();
    ASSERT_EQ(f["samples"].get<unsigned long>() + f["discovery_exits"].get<unsigned long>(),
              f["calls_observed"].get<unsigned long>()) << f.dump();
    calls += f["calls_observed"].get<unsigned long>();
  }
  ASSERT_GT(calls, 40000u);
  EXPECT_EQ(o["extra_ticks"].get<unsigned long>(), per_hit * 2 * calls) << o.dump();
}

// --max-functions sizes the runtime's function table: with 3 slots, the program's other
// functions are found but not profiled, and the note says how many and how to raise it.
TEST(ProfileTable, MaxFunctionsSizesTheTable) {
  const Outcome r = crossmod("max-functions", std::string("--quiet --policy full --max-functions 3 -- ") + PROF_MT_CYG + " 2 100");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  EXPECT_EQ(j["functions"].size(), 3u) << j["notes"].dump();
  EXPECT_TRUE(has_note(j, "functions beyond the table (3) were not profiled (--max-functions raises it")) << j["notes"].dump();
}

// The budget holds over the run, not only period by period: 1,000 functions on at once by
// 4 threads, so that a period's hits run out of budget with most functions on, and each of
// those switches itself off at its next hit (a toggle each, charged): the period ends far
// over its cap. That excess used to be forgiven at the next period, and the run charged
// itself 2.1-2.5 times a 1% budget (prof_many, both providers, 3 runs each); carried over
// as a debt it charges 1.0-1.1 times. The share is the report's own accounting (what the
// budget enforces), not a timing, less two parts the debt does not bound in a run this
// short: the runtime's set-up not repaid by the end (1-3 ms, ~1% of these runs), and the
// daemon's CPU time, charged whole after the fact, which grows with the machine's load
// (0.3-0.5% alone here; 0.8% and 1.6% in two CI runs, which then failed the old bound of
// 1.5 times the budget on the sum). What is left, the hits and their switch-offs, is held
// to 1.25 times the budget: 0.66-0.83% with the debt, 1.53-1.75% with the carry-over
// disabled (3 runs each, 27 Nov, a trial build not kept).
TEST(ProfileBudget, OverspentPeriodsAreRepaid) {
  for (const auto& [name, prog, rounds] : {std::tuple{"cyg", PROF_MANY_CYG, "8000"}, std::tuple{"pfe", PROF_MANY_PFE, "16000"}}) {
    const Outcome r = crossmod(std::string("budget-many-") + name,
                               std::string("--quiet --policy budget --budget 1% -- ") + prog + " " + rounds);
    ASSERT_EQ(r.status, 0) << name << "\n" << r.err;
    const json j = report(r);
    const json& o = j["overhead"];
    const double unpaid = o["setup_s"].get<double>() - o["setup_repaid_s"].get<double>();
    const double share = o["instr_share"].get<double>() - unpaid / j["run"]["cpu_s"].get<double>() -
                         o["daemon_share"].get<double>();
    EXPECT_GT(j["overhead"]["budget_offs"].get<double>(), 1000.0) << name << ": no storm of switch-offs\n" << j["overhead"].dump();
    EXPECT_LE(share, 0.0125) << name << "\n" << j["overhead"].dump();
  }
}

// The daemon's walk looks only at functions with something to do: calls in their window,
// samples to fold, a switch-on. prof_many_pfe's 1,000 patchable functions are all found at
// start-up and on; only 10 are called. Every walk used to read all 1,000 records (java
// under --trace '*': 51,215 of them every 10 ms; profiler/README.md, Known problems).
TEST(ProfileWalk, SkipsFunctionsWithoutCalls) {
  for (const char* policy : {"paper", "budget", "converge"}) {
    const Outcome r = crossmod(std::string("walk-") + policy,
                               std::string("--quiet --policy ") + policy + " --epoch 2ms --period 2ms -- " + PROF_MANY_PFE +
                                   " 10000000 10");
    ASSERT_EQ(r.status, 0) << policy << "\n" << r.err;
    EXPECT_EQ(r.out, "calls 400000000\n") << policy;
    const json j = report(r);
    const json& o = j["overhead"];
    ASSERT_GE(o["functions"].get<double>(), 1000.0) << o.dump();
    // The first walk reads every record; the later ones the 10 called functions and what
    // a switch-off left to switch on. All 1,000 per walk before. (The run takes ~0.5 s:
    // hundreds of 2 ms ticks, and at least a tick per wake on a loaded machine.)
    const double walks = o["walks"].get<double>();
    ASSERT_GE(walks, 10.0) << policy << "\n" << o.dump();
    const double later = o["walked_per_walk"].get<double>() * walks - o["functions"].get<double>();
    EXPECT_LT(later / (walks - 1), 200.0) << policy << "\n" << o.dump();
    for (const json& f : j["functions"]) {
      if (f["name"].get<std::string>().find("::step_00") == std::string::npos) continue;
      EXPECT_GT(f["samples"].get<double>(), 0.0) << policy << " " << f.dump();
    }
  }
}

// prof_many_pfe calls 10 of its 1,000 functions. The other 990 were on the whole run and
// saw no call: counted, not listed (unless --all-functions). Under none they were off from
// the start, so they may have been called: listed.
TEST(ProfileNeverCalled, LeftOutOfTheReport) {
  const std::string never = "(anonymous namespace)::step_999(unsigned long)";
  const std::string called = "(anonymous namespace)::step_009(unsigned long)";
  for (const char* policy : {"paper", "budget", "full"}) {
    const Outcome r = crossmod(std::string("never-") + policy, std::string("--policy ") + policy + " -- " +
                                                                   PROF_MANY_PFE + " 20000 10");
    ASSERT_EQ(r.status, 0) << policy << "\n" << r.err;
    const json j = report(r);
    EXPECT_EQ(function(j, never), nullptr) << policy;
    ASSERT_NE(function(j, called), nullptr) << policy;
    EXPECT_EQ((*function(j, called))["calls_observed"].get<double>() > 0, true) << policy;
    const json& n = j["never_called"];
    EXPECT_GE(n["functions"].get<double>(), 990.0) << policy << n.dump();
    EXPECT_FALSE(n["listed"].get<bool>());
    EXPECT_GE(n["by_object"][PROF_MANY_PFE].get<double>(), 990.0) << policy << n.dump();
    EXPECT_GE(j["overhead"]["functions"].get<double>(), 1000.0) << policy;
    EXPECT_LT(j["functions"].size(), 100u) << policy;
    const std::string csv = slurp(r.dir / "profile.csv");
    EXPECT_EQ(csv.find("step_999"), std::string::npos) << policy;
    EXPECT_NE(csv.find("step_009"), std::string::npos) << policy;
    EXPECT_NE(r.err.find("never called"), std::string::npos) << policy << r.err;
  }
  const Outcome all = crossmod("never-all", std::string("--quiet --policy paper --all-functions -- ") + PROF_MANY_PFE + " 20000 10");
  ASSERT_EQ(all.status, 0) << all.err;
  const json a = report(all);
  ASSERT_NE(function(a, never), nullptr);
  EXPECT_EQ((*function(a, never))["calls_observed"].get<double>(), 0.0);
  EXPECT_TRUE(a["never_called"]["listed"].get<bool>());
  EXPECT_GE(a["never_called"]["functions"].get<double>(), 990.0);
  EXPECT_GE(a["functions"].size(), 1000u);
  const Outcome none = crossmod("never-none", std::string("--quiet --policy none -- ") + PROF_MANY_PFE + " 20000 10");
  ASSERT_EQ(none.status, 0) << none.err;
  const json z = report(none);
  EXPECT_NE(function(z, never), nullptr);
  EXPECT_EQ(z["never_called"]["functions"].get<double>(), 0.0);
}

// The systematic term: a leaf's every compensated sample took off its entry hit's
// calib_ticks and self_ticks, and nothing for callees, so its mean_sys_ticks is exactly
// |calib_ticks_per_hit + self_ticks| of its provider, and the bound is the interval widened
// by it on both sides, and at the top also by the machine's gaps (share_upper / (1 -
// share_upper) of the mean: profile_report.hpp, gap_term). The interval needs two batches (epochs
// with samples): at the default 10 ms epoch this ~35 ms run sometimes had one (the first wake lands
// anywhere in its tick; CI, 28 Nov), so epochs of 2 ms and a run of ~150 ms.
TEST(ProfileSystematic, ALeafsTermIsItsConstants) {
  for (const auto& [prog, provider] :
       {std::pair{std::string(PROF_MT_PFE), "patchable"}, std::pair{std::string(PROF_MT_CYG), "cyg"}}) {
    const Outcome r = crossmod(std::string("sys-") + provider, "--quiet --policy paper --epoch 2ms -- " + prog + " 2 1000000");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = report(r);
    const json& o = j["overhead"];
    ASSERT_TRUE(o["self_ticks"][provider].is_number_integer()) << o.dump();
    const double expect = std::abs(o["calib_ticks_per_hit"].get<double>() + o["self_ticks"][provider].get<double>());
    const json* a = function(j, kLeafA);
    ASSERT_NE(a, nullptr);
    ASSERT_GT((*a)["samples"].get<double>(), (*a)["uncompensated_samples"].get<double>());
    EXPECT_DOUBLE_EQ((*a)["mean_sys_ticks"].get<double>(), expect) << provider << " " << a->dump();
    ASSERT_TRUE((*a)["mean_ci_ticks"].is_array()) << a->dump();
    EXPECT_DOUBLE_EQ((*a)["mean_bound_ticks"][0].get<double>(), (*a)["mean_ci_ticks"][0].get<double>() - expect);
    const double su = std::min(j["run"]["machine_gaps"]["share_upper"].get<double>(), 0.9);
    const double mean = (*a)["mean_ticks"].get<double>();
    EXPECT_NEAR((*a)["mean_bound_ticks"][1].get<double>(),
                (*a)["mean_ci_ticks"][1].get<double>() + expect + mean * su / (1 - su),
                1e-6 * mean);
    if ((*a)["oncpu_mean_ci_ticks"].is_array()) {
      const double oncpu = (*a)["oncpu_mean_ticks"].get<double>();
      EXPECT_NEAR((*a)["oncpu_mean_bound_ticks"][1].get<double>(),
                  (*a)["oncpu_mean_ci_ticks"][1].get<double>() + expect + oncpu * su / (1 - su),
                  1e-6 * oncpu);
    }
    const std::string csv = slurp(r.dir / "profile.csv");
    EXPECT_NE(csv.find(",mean_sys_ticks\n"), std::string::npos);
  }
}

// converge stops a function once more samples would only narrow an interval that is
// already narrower than its systematic term: at --ci 0.0001% no leaf gets there by its
// relative width (leaf_a's mean is ~100 ticks: 0.0001 ticks), but its half-width falls
// under its term (~25-60 ticks) within a few batches.
TEST(ProfileSystematic, ConvergeStopsAtTheSystematicTerm) {
  const Outcome r = crossmod("converge-sys", std::string("--quiet --policy converge --ci 0.0001% --epoch 2ms -- ") +
                                                 PROF_MT_PFE + " 2 2000000");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = report(r);
  const json* a = function(j, kLeafA);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE((*a)["converged"].get<bool>()) << a->dump();
  ASSERT_TRUE((*a)["mean_ci_ticks"].is_array()) << a->dump();
  const double half = ((*a)["mean_ci_ticks"][1].get<double>() - (*a)["mean_ci_ticks"][0].get<double>()) / 2;
  EXPECT_LT(half, 4 * (*a)["mean_sys_ticks"].get<double>()) << a->dump();  // the launcher's t interval, a little wider
}

TEST(ProfileBadInput, ExitsTwoAndWritesNothing) {
  const std::string prog = PROF_MT_CYG;
  const std::string bad_metrics = (fs::temp_directory_path() / ("crossmod-bad-" + std::to_string(getpid()) + ".toml")).string();
  {
    std::ofstream f(bad_metrics);
    f << "[[metric]]\nname = \"x\"\nkind = \"latencyy\"\n";
  }
  const char* const cases[] = {
      "--policy bogus -- ",
      "--budget 0 -- ",
      "--budget 150% -- ",
      "--period 10 -- ",
      "--epoch 1us -- ",
      "--samples 0 -- ",
      "--ci abc -- ",
      "--metrics /nonexistent.toml -- ",
      "--trace-object '*' -- ",
      "--max-functions 0 -- ",
      "--max-functions 65537 -- ",
      "--trace '' -- ",
      "--trace 'x*' --trace-object '' -- ",
  };
  int k = 0;
  for (const char* c : cases) {
    const Outcome r = crossmod("bad-" + std::to_string(k++), std::string(c) + prog + " 1 10");
    EXPECT_EQ(r.status, 2) << c << r.err;
    EXPECT_EQ(r.out, "") << c;
    EXPECT_FALSE(fs::exists(r.dir)) << c;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c << r.err;
  }
  const Outcome m = crossmod("bad-metrics", "--metrics " + bad_metrics + " -- " + prog + " 1 10");
  EXPECT_EQ(m.status, 2);
  EXPECT_FALSE(fs::exists(m.dir));
  EXPECT_NE(m.err.find("latencyy"), std::string::npos) << m.err;
  const Outcome p = crossmod("bad-prog", "-- /nonexistent/program");
  EXPECT_EQ(p.status, 2);
  EXPECT_FALSE(fs::exists(p.dir));
  fs::remove(bad_metrics);
}

}  // namespace
