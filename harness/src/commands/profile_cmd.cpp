// `crossmod profile [options] -- PROGRAM ARGS...`: runs PROGRAM with libcrossmod_probes.so and
// libcrossmod_profile.so preloaded (the rapid-toggling latency profiler, profiler/README.md),
// waits for it, and builds the report from the runtime's crash-proof segment files:
// OUT/profile.json, profile.csv, profile.folded, the raw segments in OUT/raw, and a table
// on stderr. The program's exit status is kept (128 + signal when it was killed).
// Every input is validated before anything is written (bad input: one line, exit 2).
// Main thread only.
#include <fmt/core.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "crossmod/x86.hpp"
#include "results/results_io.hpp"
#include "runs/sweep.hpp"
#include "crossmod/probes.hpp"
#include "crossmod/profile_report.hpp"

extern char** environ;

namespace crossmod::harness {
namespace {

namespace fs = std::filesystem;
namespace prof = crossmod::profile;
// 1 ms chunks of the gap meter on each side of the run: ~10-100 gaps each here.
constexpr unsigned kGapChunks = 20;

struct ProfileOptions {
  std::string policy = "budget";
  std::vector<std::string> metrics;
  std::string functions = "*";
  std::string trace, trace_object;
  std::string budget = "5%", period = "10ms", epoch = "10ms", ci = "5%";
  unsigned samples = 10;
  unsigned max_functions = 16384;
  std::string out;
  bool quiet = false;
  bool all_functions = false;  // also the never-called ones (set_aside_never_called)
  std::vector<std::string> command;
};

// The program being profiled, for the forwarding handler below (0: none).
volatile sig_atomic_t g_child = 0;
// SIGTERM / SIGHUP to the launcher go to the program instead, so that `kill` of the
// launcher ends the program and still gives a report. Async-signal-safe: kill(2) only.
extern "C" void forward_signal(int sig) {
  const int saved = errno;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
  errno = saved;
}

double now_s() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// "5%" or "0.05" -> 0.05, in (0, 1].
double parse_fraction(const std::string& flag, const std::string& s) {
  std::string v = s;
  double scale = 1;
  if (!v.empty() && v.back() == '%') {
    v.pop_back();
    scale = 0.01;
  }
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x * scale <= 0 || x * scale > 1)
    throw UsageError(fmt::format("profile: {} '{}' is not a fraction in (0, 1] (e.g. 5% or 0.05)", flag, s));
  return x * scale;
}

// "10ms", "500us", "2s", "100000ns" -> seconds, in [100us, 10s].
// An epoch or period: parse_duration's forms with a unit (a bare "10" is too easily meant as
// milliseconds), between 100us and 10s.
double parse_period(const std::string& flag, const std::string& s) {
  const double v = parse_duration(s, "profile: " + flag);
  if (std::isdigit(static_cast<unsigned char>(s.back())) || v < 100e-6 || v > 10)
    throw UsageError(fmt::format("profile: {} '{}' is not a duration between 100us and 10s (e.g. 10ms)", flag, s));
  return v;
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : std::string();
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t colon = p.find(':', start);
    if (colon == std::string::npos) colon = p.size();
    std::string dir = p.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/" + name;
    struct stat st {};
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
    start = colon + 1;
  }
  return {};
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error(fmt::format("cannot write {}", p.string()));
}

void run_profile(const ProfileOptions& o) {
  // 1. Validate everything; nothing is written before this block ends.
  if (o.command.empty()) throw UsageError("profile: name a program after --");
  static const char* const kPolicies[] = {"paper", "budget", "converge", "full", "none"};
  bool policy_ok = false;
  for (const char* p : kPolicies) policy_ok = policy_ok || o.policy == p;
  if (!policy_ok)
    throw UsageError(fmt::format("profile: --policy '{}' is not one of paper|budget|converge|full|none", o.policy));
  prof::RunInfo run;
  run.command = o.command;
  run.policy.name = o.policy;
  run.policy.budget = parse_fraction("--budget", o.budget);
  run.policy.ci = parse_fraction("--ci", o.ci);
  run.policy.period_s = parse_period("--period", o.period);
  run.policy.epoch_s = parse_period("--epoch", o.epoch);
  if (o.samples == 0 || o.samples > 1'000'000) throw UsageError("profile: --samples must be in 1..1000000");
  run.policy.samples = o.samples;
  if (o.max_functions == 0 || o.max_functions > crossmod::probes::kMaxProbes)
    throw UsageError(
        fmt::format("profile: --max-functions must be in 1..{}", crossmod::probes::kMaxProbes));
  if (!o.trace_object.empty() && o.trace.empty()) throw UsageError("profile: --trace-object needs --trace");
  std::vector<prof::MetricSpec> metrics;
  std::vector<std::string> metric_files = o.metrics;
  if (metric_files.empty()) {
    const std::string def = std::string(CROSSMOD_SOURCE_DIR) + "/configs/metrics/default.toml";
    if (access(def.c_str(), R_OK) == 0) metric_files.push_back(def);
    else run.notes.push_back("no metric file given and " + def + " is missing: no metrics section");
  }
  for (const std::string& f : metric_files) {
    if (access(f.c_str(), R_OK) != 0) throw UsageError(fmt::format("profile: metrics {}: cannot read", f));
    std::string err;
    if (!prof::load_metrics(f, &metrics, &err)) throw UsageError("profile: " + err);
  }
  const std::string program = find_program(o.command[0]);
  if (program.empty()) throw UsageError(fmt::format("profile: {}: no such executable", o.command[0]));
  for (const char* lib : {prof::probes_library(), prof::profile_library()})
    if (access(lib, R_OK) != 0)
      throw UsageError(fmt::format("profile: {} is missing; build targets crossmod_probes and crossmod_profile", lib));
  const fs::path out = o.out.empty() ? fs::path("results/profile") /
                                           (fs::path(o.command[0]).filename().string() + "-" + utc_stamp())
                                     : fs::path(o.out);
  const fs::path raw = out / "raw";
  std::error_code ec;
  if (fs::exists(raw, ec) && !fs::is_empty(raw, ec))
    throw UsageError(fmt::format("profile: {} already holds raw data; choose another --out", raw.string()));
  if (fs::exists(out / "profile.json", ec))
    throw UsageError(fmt::format("profile: {} already holds a profile; choose another --out", out.string()));

  // 2. Launch.
  fs::create_directories(raw, ec);
  if (ec) throw UsageError(fmt::format("profile: cannot create {}: {}", raw.string(), ec.message()));
  const double hz0 = tsc_info().hz;  // the runtime's budget arithmetic before the run
  std::vector<std::string> env;
  std::string preload = std::string(prof::probes_library()) + ":" + prof::profile_library();
  // The launcher sets every CROSSMOD_PROFILE_* itself; only the opt-in switches
  // (profiler/README.md, Environment) pass through.
  static constexpr const char* kPassThrough[] = {
      "CROSSMOD_PROFILE_NO_JITTER=",         "CROSSMOD_PROFILE_RETRACT=",
      "CROSSMOD_PROFILE_RETRACT_WAKE=",      "CROSSMOD_PROFILE_TAILCALL_GUARD=",
      "CROSSMOD_PROFILE_TRACE_TRAPS=",       "CROSSMOD_PROFILE_NO_SWITCHES=",
      "CROSSMOD_PROFILE_TEST_OFF_STALL_US=", "CROSSMOD_PROFILE_FORK_SHARED="};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("CROSSMOD_PROFILE_", 0) == 0 &&
        std::none_of(std::begin(kPassThrough), std::end(kPassThrough),
                     [&](const char* p) { return kv.rfind(p, 0) == 0; }))
      continue;
    if (kv.rfind("LD_PRELOAD=", 0) == 0) {
      if (kv.size() > 11) preload += ":" + kv.substr(11);
      continue;
    }
    env.push_back(std::move(kv));
  }
  env.push_back("LD_PRELOAD=" + preload);
  env.push_back("CROSSMOD_PROFILE_DIR=" + fs::absolute(raw).string());
  env.push_back("CROSSMOD_PROFILE_POLICY=" + o.policy);
  env.push_back(fmt::format("CROSSMOD_PROFILE_SAMPLES={}", o.samples));
  env.push_back(fmt::format("CROSSMOD_PROFILE_MAX_FUNCS={}", o.max_functions));
  env.push_back(fmt::format("CROSSMOD_PROFILE_BUDGET={}", run.policy.budget));
  env.push_back(fmt::format("CROSSMOD_PROFILE_PERIOD_NS={}", std::llround(run.policy.period_s * 1e9)));
  env.push_back(fmt::format("CROSSMOD_PROFILE_EPOCH_NS={}", std::llround(run.policy.epoch_s * 1e9)));
  env.push_back(fmt::format("CROSSMOD_PROFILE_CI={}", run.policy.ci));
  env.push_back(fmt::format("CROSSMOD_PROFILE_TSC_HZ={:.0f}", hz0));
  env.push_back("CROSSMOD_PROFILE_FUNCTIONS=" + o.functions);
  if (!o.trace.empty()) env.push_back("CROSSMOD_PROFILE_TRACE=" + o.trace);
  if (!o.trace_object.empty()) env.push_back("CROSSMOD_PROFILE_TRACE_OBJECT=" + o.trace_object);
  std::vector<char*> envp, argv;
  for (std::string& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Like system(3): the launcher ignores SIGINT/SIGQUIT while the program runs, so a ^C
  // ends the program and still gives a report; the child gets default dispositions.
  struct sigaction ign {}, fwd {}, old_int {}, old_quit {}, old_term {}, old_hup {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGINT, &ign, &old_int);
  sigaction(SIGQUIT, &ign, &old_quit);
  fwd.sa_handler = forward_signal;
  sigemptyset(&fwd.sa_mask);
  fwd.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &fwd, &old_term);
  sigaction(SIGHUP, &fwd, &old_hup);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t def, none;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGQUIT);
  sigaddset(&def, SIGTERM);
  sigaddset(&def, SIGHUP);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  // The machine's gaps, 20 ms before and 20 ms after the program (profile_report.hpp,
  // MachineGaps): never while it runs, so they take nothing from it.
  run.gaps = prof::measure_gaps(kGapChunks, hz0);
  rusage ru0{}, ru1{};
  getrusage(RUSAGE_CHILDREN, &ru0);
  const double w0 = now_s();
  run.start_tsc = x86::rdtsc();
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  int status = 0;
  if (rc == 0) {
    g_child = pid;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
  }
  run.end_tsc = x86::rdtsc();
  const double w1 = now_s();
  getrusage(RUSAGE_CHILDREN, &ru1);
  run.gaps.add(prof::measure_gaps(kGapChunks, hz0));
  if (run.gaps.spin_ticks <= 0)
    run.notes.push_back(fmt::format(
        "the machine's gaps were not measured (all {} chunks of the meter were switched "
        "out): the bounds have no gap term",
        run.gaps.chunks));
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  auto secs = [](const timeval& a, const timeval& b) {
    return static_cast<double>(b.tv_sec - a.tv_sec) + static_cast<double>(b.tv_usec - a.tv_usec) * 1e-6;
  };
  run.wall_s = w1 - w0;
  run.user_s = secs(ru0.ru_utime, ru1.ru_utime);
  run.sys_s = secs(ru0.ru_stime, ru1.ru_stime);
  // The frequency over the run is exact enough once the run is long against clock jitter.
  run.tsc_hz = run.wall_s > 0.2 ? static_cast<double>(run.end_tsc - run.start_tsc) / run.wall_s : hz0;
  if (rc != 0) {
    run.exit_kind = "spawn_failed";
    run.status = 127;
    run.notes.push_back(fmt::format("cannot execute {}: {}", program, std::strerror(rc)));
  } else if (WIFSIGNALED(status)) {
    run.exit_kind = "signal";
    run.signal = WTERMSIG(status);
    run.status = 128 + run.signal;
  } else {
    run.status = WEXITSTATUS(status);
  }

  // 3. Report.
  prof::ProfileData data = prof::read_segments(raw.string(), run);
  prof::finish_stats(&data, run);
  prof::set_aside_never_called(&data, o.all_functions);
  if (run.exit_kind == "signal") {
    run.notes.push_back(fmt::format("the program was killed by signal {} ({}); counts are those written before it",
                                    run.signal, strsignal(run.signal)));
    bool patchable = false;
    for (const prof::FunctionStats& f : data.functions) patchable = patchable || f.provider == "patchable";
    if (run.signal == SIGABRT && patchable)
      run.notes.push_back(
          "SIGABRT with patchable-entry probes: a C++ exception thrown through a function whose exit probe was "
          "on ends in std::terminate (probes layer: no CFI for a redirected return), and 'exit trampoline "
          "without a frame' is a missed tail call (profiler/README.md, Known problems); narrow --functions");
  }
  try {
    write_file(out / "profile.json", prof::report_json(data, run, metrics).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    write_file(out / "profile.csv", prof::report_csv(data));
    write_file(out / "profile.folded", prof::report_folded(data));
  } catch (const std::exception& e) {
    fmt::print(stderr, "crossmod: profile: {}\n", e.what());
  }
  if (!o.quiet) {
    fmt::print(stderr, "{}", prof::report_table(data, run, 20));
    fmt::print(stderr, "  report: {}\n", (out / "profile.json").string());
  }
  exit_code() = run.status;
}

}  // namespace

void register_profile(CLI::App& app) {
  auto opt = std::make_shared<ProfileOptions>();
  auto* cmd = app.add_subcommand(
      "profile", "rapid-toggling latency profiler: per-function calls and latency (LD_PRELOAD, no source change)");
  cmd->add_option("--policy", opt->policy, "paper|budget|converge|full|none (default budget)");
  cmd->add_option("--metrics", opt->metrics, "metric description file (TOML), repeatable");
  // An empty pattern: --functions would focus on nothing, and --trace and --trace-object
  // would silently mean "not given" (no tracepoints, no restriction).
  const CLI::Validator non_empty(
      [](std::string& v) {
        return v.empty() ? std::string("the pattern must not be empty") : std::string();
      },
      "PATTERN", "non-empty");
  cmd->add_option("--functions", opt->functions,
                  "fnmatch focus on demangled function names (default *)")
      ->check(non_empty);
  cmd->add_option("--trace", opt->trace,
                  "tracepoint probes on functions of unmodified objects matching this (objects "
                  "dlopen'ed later too)")
      ->check(non_empty);
  cmd->add_option("--trace-object", opt->trace_object,
                  "restrict --trace to objects whose path matches")
      ->check(non_empty);
  cmd->add_option("--budget", opt->budget, "share of every period instrumentation may use (default 5%)");
  cmd->add_option("--period", opt->period, "budget period (default 10ms)");
  cmd->add_option("--samples", opt->samples, "samples per function per epoch before it switches off (default 10)");
  cmd->add_option("--epoch", opt->epoch, "reactivation epoch of the daemon (default 10ms)");
  cmd->add_option("--max-functions", opt->max_functions,
                  "function table size: functions found beyond it are not profiled (default 16384, at most 65536)");
  cmd->add_option("--ci", opt->ci,
                  "converge: relative half-width of the 95% interval (default 5%), or under the systematic term");
  cmd->add_option("--out", opt->out, "output directory (default results/profile/<program>-<utc>)");
  cmd->add_flag("--quiet", opt->quiet, "no table on stderr");
  cmd->add_flag("--all-functions", opt->all_functions,
                "list every function found, also those whose probe was on the whole run and saw no call");
  cmd->add_option("command", opt->command, "-- PROGRAM ARGS...")->required();
  cmd->callback([opt] { run_profile(*opt); });
}

}  // namespace crossmod::harness
