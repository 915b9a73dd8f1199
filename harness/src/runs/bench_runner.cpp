// `crossmod bench` runner: loads Tmax, pins the patcher, records what shapes the numbers
// in the JSON context, drives Google Benchmark with a constructed argv, then writes the
// per-operation latency samples (CSV) and, on request, the headline ratios (summary).
// Thread safety: main thread only; not async-signal-safe.
#include <benchmark/benchmark.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runs/bench_runner.hpp"
#include "bench_support.hpp"
#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "crossmod/tmax_config.hpp"
#include "crossmod/x86.hpp"
#include "results/results_io.hpp"  // utc_stamp: one stamp format for every results file
#include "machine/topology.hpp"
#include "tracepoint_suite.hpp"  // tracepoints/bench

namespace crossmod::bench {
namespace {

constexpr int kBenchSchemaVersion = 1;
// PLDI'16 Table 2: callpatch toggle latency in TSC ticks, the two values the paper
// reports. Different machine and year: shown for context, not as a claim.
constexpr double kPaperCallpatchTicks[] = {432, 315};

// What an empty rdtscp_ordered() bracket reads: the floor under every latency sample,
// not subtracted from them (it is part of what a caller timing a patch would see).
// Median of back-to-back pairs on the pinned patcher thread.
std::uint64_t timer_overhead_ticks() {
  std::vector<std::uint64_t> d(2001);
  for (auto& x : d) {
    std::uint64_t t0 = x86::rdtscp_ordered();
    std::uint64_t t1 = x86::rdtscp_ordered();
    x = t1 - t0;
  }
  std::nth_element(d.begin(), d.begin() + 1000, d.end());
  return d[1000];
}

std::string join(const std::vector<int>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

// Every benchmark runs with UseRealTime() (and throughput with Iterations(1)), so that
// Google Benchmark sizes runs by wall time: on a shared 2-PU VM the patcher thread may get
// a small fraction of a CPU, and sizing by CPU time made runs last 100x longer than asked.
// Google Benchmark 1.7.1 appends "/real_time" and "/iterations:1" to the names for those
// settings; the reporters drop both so names keep crossmod's scheme
// (latency/<op>/executors:<n>, ...), which the analysis code parses.
void keep_crossmod_name(benchmark::BenchmarkReporter::Run* r) {
  r->run_name.time_type.clear();
  r->run_name.iterations.clear();
}
std::vector<benchmark::BenchmarkReporter::Run> renamed(
    const std::vector<benchmark::BenchmarkReporter::Run>& reports) {
  std::vector<benchmark::BenchmarkReporter::Run> out = reports;
  for (auto& r : out) keep_crossmod_name(&r);
  return out;
}

// Console output for people, plus a copy of every run for the summary, so the summary
// uses exactly the values that went into the JSON.
class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  explicit CapturingReporter(OutputOptions o) : ConsoleReporter(o) {}
  void ReportRuns(const std::vector<Run>& reports) override {
    std::vector<Run> rs = renamed(reports);
    for (const Run& r : rs) runs[r.benchmark_name()] = r;
    ConsoleReporter::ReportRuns(rs);
  }
  std::map<std::string, Run> runs;
};

class JsonReporter : public benchmark::JSONReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override {
    JSONReporter::ReportRuns(renamed(reports));
  }
};

// Google Benchmark matches --benchmark_filter against its internal names, which carry
// "/iterations:1" and "/real_time"; a user's end anchor refers to crossmod's name.
std::string gb_filter(const std::string& f) {
  if (!f.empty() && f.back() == '$' && (f.size() < 2 || f[f.size() - 2] != '\\'))
    return f.substr(0, f.size() - 1) + "(/iterations:1)?(/real_time)?$";
  return f;
}

// ---- summary -------------------------------------------------------------------------

struct Term {
  std::string source;   // "benchmark:counter", or a description of a constant
  double value = 0;
};
struct Ratio {
  std::string name;
  double value = 0;
  Term num, den;
};

class Summary {
 public:
  explicit Summary(const std::map<std::string, benchmark::BenchmarkReporter::Run>& runs)
      : runs_(runs) {}

  std::optional<Term> term(const std::string& bench, const std::string& counter) {
    auto it = runs_.find(bench);
    if (it == runs_.end()) {
      note_missing(fmt::format("{}: not run (filtered out)", bench));
      return std::nullopt;
    }
    if (it->second.error_occurred) {
      note_missing(fmt::format("{}: {}", bench, it->second.error_message));
      return std::nullopt;
    }
    auto c = it->second.counters.find(counter);
    if (c == it->second.counters.end()) {
      note_missing(fmt::format("{}: no counter {}", bench, counter));
      return std::nullopt;
    }
    return Term{bench + ":" + counter, c->second.value};
  }

  void ratio(const std::string& name, std::optional<Term> num, std::optional<Term> den) {
    if (!num || !den) return;
    if (den->value == 0) {
      note_missing(fmt::format("{}: denominator {} is 0", name, den->source));
      return;
    }
    ratios_.push_back(Ratio{name, num->value / den->value, *num, *den});
  }

  const std::vector<Ratio>& ratios() const { return ratios_; }
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  void note_missing(std::string m) {
    if (std::find(missing_.begin(), missing_.end(), m) == missing_.end())
      missing_.push_back(std::move(m));
  }
  const std::map<std::string, benchmark::BenchmarkReporter::Run>& runs_;
  std::vector<Ratio> ratios_;
  std::vector<std::string> missing_;
};

// Latency ratios use ticks_p50: on a VM a few preempted samples move the mean a lot.
Summary compute_summary(const std::map<std::string, benchmark::BenchmarkReporter::Run>& runs) {
  Summary s(runs);
  const std::string p50 = "ticks_p50";
  auto lat = [](const std::string& op, unsigned n) {
    return fmt::format("latency/{}/executors:{}", op, n);
  };
  for (unsigned n : {0u, 1u}) {
    for (unsigned sp = 0; sp <= 4; ++sp) {
      std::string cp = lat(fmt::format("callpatch_s{}", sp), n);
      for (double paper : kPaperCallpatchTicks)
        s.ratio(fmt::format("callpatch_s{}/executors:{} vs paper {:.0f} ticks", sp, n, paper),
                s.term(cp, p50), Term{"PLDI'16 Table 2 (other machine)", paper});
    }
    for (unsigned sp = 1; sp <= 4; ++sp) {
      std::string wp = lat(fmt::format("wordpatch_straddle_s{}", sp), n);
      s.ratio(fmt::format("wordpatch_straddle_s{}/executors:{} / (2 x Tmax)", sp, n),
              s.term(wp, p50), Term{"2 x tmax_ticks", 2.0 * static_cast<double>(env().tmax_ticks)});
      s.ratio(fmt::format("synccore_straddle_s{}/executors:{} / wordpatch_straddle_s{}", sp, n, sp),
              s.term(lat(fmt::format("synccore_straddle_s{}", sp), n), p50), s.term(wp, p50));
    }
    s.ratio(fmt::format("wordpatch_async_batch16/executors:{} per site / wordpatch_straddle_s1", n),
            s.term(lat("wordpatch_async_batch16", n), p50),
            s.term(lat("wordpatch_straddle_s1", n), p50));
    s.ratio(fmt::format("stop_the_world/executors:{} / callpatch_s1", n),
            s.term(lat("stop_the_world", n), p50), s.term(lat("callpatch_s1", n), p50));
    s.ratio(fmt::format("mprotect_callpatch/executors:{} / callpatch_s0", n),
            s.term(lat("mprotect_callpatch", n), p50), s.term(lat("callpatch_s0", n), p50));
    s.ratio(fmt::format("mprotect_raw_callpatch/executors:{} / callpatch_s0", n),
            s.term(lat("mprotect_raw_callpatch", n), p50), s.term(lat("callpatch_s0", n), p50));
  }
  for (const char* proto : {"callpatch", "wordpatch"}) {
    for (unsigned n = 1; n <= env().max_executors; ++n) {
      auto tp = [&](unsigned rate) {
        return fmt::format("throughput/{}/rate:{}/executors:{}", proto, rate, n);
      };
      for (unsigned rate : {100000u, 1000000u}) {
        // Against 0 Hz at the same state mix (throughput_bench.cpp): 1.0 = toggling is free.
        s.ratio(fmt::format("throughput/{}/executors:{} calls_per_s at {} Hz / at 0 Hz, same state mix", proto,
                            n, rate),
                s.term(tp(rate), "calls_per_s"), s.term(tp(rate), "calls_per_s_same_mix_0hz"));
        s.ratio(fmt::format("throughput/{}/executors:{} calls_per_executor_cpu_s at {} Hz / at 0 Hz, same state "
                            "mix",
                            proto, n, rate),
                s.term(tp(rate), "calls_per_executor_cpu_s"),
                s.term(tp(rate), "calls_per_executor_cpu_s_same_mix_0hz"));
      }
    }
  }
  const std::string ns = "ns_per_call";
  s.ratio("invoke active_site / direct_call", s.term("invoke/active_site", ns),
          s.term("invoke/direct_call", ns));
  s.ratio("invoke flag_guard_on / direct_call", s.term("invoke/flag_guard_on", ns),
          s.term("invoke/direct_call", ns));
  s.ratio("invoke active_site / nop5_site", s.term("invoke/active_site", ns),
          s.term("invoke/nop5_site", ns));
  for (unsigned sp = 0; sp <= 4; ++sp)
    s.ratio(fmt::format("invoke callpatch_off_s{} / nop5_site", sp),
            s.term(fmt::format("invoke/callpatch_off_s{}", sp), ns), s.term("invoke/nop5_site", ns));
  // Tracepoints (tracepoints/bench/tracepoint_suite.cpp): medians of interleaved rounds.
  for (const char* alt : {"jump_enabled", "jump_disabled", "after_remove"})
    s.ratio(fmt::format("tracepoint {} / direct call", alt),
            s.term("tracepoint/invoke", fmt::format("{}_ticks_p50", alt)),
            s.term("tracepoint/invoke", "direct_ticks_p50"));
  s.ratio("tracepoint trap_enabled_short / direct call (4-byte function)",
          s.term("tracepoint/invoke", "trap_enabled_short_ticks_p50"),
          s.term("tracepoint/invoke", "direct_short_ticks_p50"));
  s.ratio("tracepoint trap_enabled_short / jump_enabled",
          s.term("tracepoint/invoke", "trap_enabled_short_ticks_p50"),
          s.term("tracepoint/invoke", "jump_enabled_ticks_p50"));
  s.ratio("tracepoint install_sync_core / enable (toggle)",
          s.term("tracepoint/latency", "install_sync_core_ticks_p50"),
          s.term("tracepoint/latency", "enable_ticks_p50"));
  s.ratio("tracepoint install_tmax / (2 x Tmax)", s.term("tracepoint/latency", "install_tmax_ticks_p50"),
          Term{"2 x tmax_ticks", 2.0 * static_cast<double>(env().tmax_ticks)});
  s.ratio("tracepoint install_inline / enable (toggle)",
          s.term("tracepoint/latency", "install_inline_ticks_p50"),
          s.term("tracepoint/latency", "enable_ticks_p50"));
  return s;
}

std::string summary_note(const CpuIdentity& cpu) {
  return fmt::format(
      "Absolute times on this machine{} are noisy; only ratios between benchmarks of this one "
      "run are claimed. Latency ratios use ticks_p50. The paper comparison (PLDI'16 Table 2) "
      "crosses machines and is context, not a claim.",
      cpu.hypervisor ? fmt::format(" (virtualised, hypervisor '{}')", cpu.hypervisor_vendor) : "");
}

using Json = nlohmann::ordered_json;

// A ratio term as the summary has always written it: six significant digits (the
// measurements carry fewer), null if not finite.
Json sig6(double v) {
  if (!std::isfinite(v)) return nullptr;
  return Json::parse(fmt::format("{:.6g}", v));
}

void write_summary(const std::string& path, const Summary& s, const std::string& json_name,
                   const std::string& note) {
  // One ratio per line, as the summary has always been laid out.
  auto lines = [](const std::vector<std::string>& items) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ",\n  " : "\n  ") + items[i];
    return out + "\n]";
  };
  std::vector<std::string> ratios, missing;
  for (const Ratio& r : s.ratios()) {
    ratios.push_back(harness::json_one_line(Json{{"name", r.name},
                                                 {"value", sig6(r.value)},
                                                 {"numerator", r.num.source},
                                                 {"numerator_value", sig6(r.num.value)},
                                                 {"denominator", r.den.source},
                                                 {"denominator_value", sig6(r.den.value)}}));
  }
  for (const std::string& m : s.missing()) missing.push_back(harness::json_string(m));
  harness::JsonObject doc;
  doc.num("crossmod_schema_version", static_cast<std::int64_t>(kBenchSchemaVersion))
      .str("benchmark_json", json_name)
      .str("machine_slug", machine_slug())
      .num("tmax_ticks", env().tmax_ticks)
      .str("tmax_source", env().tmax_source)
      .boolean("tmax_is_default", env().tmax_is_default)
      .raw("tsc_hz", fmt::format("{:.0f}", env().tsc_hz))
      .str("note", note)
      .raw("ratios", lines(ratios))
      .raw("missing", lines(missing));
  const std::string out = doc.render() + "\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f || std::fputs(out.c_str(), f) < 0 || std::fclose(f) != 0)
    throw std::runtime_error(fmt::format("cannot write {}", path));
}

void print_summary(const Summary& s, const std::string& note) {
  fmt::print("\nHeadline ratios (one run):\n");
  std::size_t w = 0;
  for (const Ratio& r : s.ratios()) w = std::max(w, r.name.size());
  for (const Ratio& r : s.ratios())
    fmt::print("  {:<{}}  {:>10.3f}   ({:.6g} / {:.6g})\n", r.name, w, r.value, r.num.value,
               r.den.value);
  std::size_t filtered = 0;
  for (const std::string& m : s.missing()) filtered += m.ends_with("(filtered out)");
  if (filtered) fmt::print("  {} input benchmark(s) filtered out; their ratios are omitted\n", filtered);
  if (s.missing().size() > filtered) {
    fmt::print("  not computed:\n");
    for (const std::string& m : s.missing())
      if (!m.ends_with("(filtered out)")) fmt::print("    {}\n", m);
  }
  fmt::print("  note: {}\n", note);
}

// ---- the probes suite (probes/bench/probes_bench.cpp) -----------------------------------
// A child process: libcrossmod_probes.so links its own copy of the engine, which must not
// share a process with this binary's. It gets the run's Tmax, executor count, window and
// filter; its JSON and latency CSV sit beside the engine suites' files.
extern "C" char** environ;

std::string probes_bench_binary() {
  if (const char* p = std::getenv("CROSSMOD_PROBES_BENCH"); p != nullptr && *p != '\0') return p;
  return CROSSMOD_PROBES_BENCH;
}

// probes_bench exits 3 when the filter matches none of its benchmarks.
constexpr int kProbesNoMatch = 3;

// Exit code of the child; -1 (with a message) if it could not run or was killed.
int run_probes_child(const std::vector<std::string>& extra, const Options& opts) {
  std::vector<std::string> args = {probes_bench_binary()};
  if (args[0].empty()) return kProbesNoMatch;  // not built (sanitizer builds)
  const Env& e = env();
  args.push_back(fmt::format("--crossmod_wait_ticks={}", e.tmax_ticks));
  args.push_back(fmt::format("--crossmod_max_executors={}", e.max_executors));
  args.push_back(fmt::format("--crossmod_window_s={}", e.throughput_window_s));
  if (e.smoke) args.push_back("--crossmod_smoke");
  if (!opts.filter.empty()) args.push_back("--benchmark_filter=" + opts.filter);
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), environ);
      rc != 0) {
    fmt::print(stderr, "crossmod bench: cannot run the probes suite {}: {}\n", args[0],
               std::strerror(rc));
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fmt::print(stderr, "crossmod bench: the probes suite was killed by signal {}\n", WTERMSIG(status));
  return -1;
}

}  // namespace

int run(const Options& opts) {
  // ---- Tmax: the calibrated config, or a loudly reported default.
  TmaxConfig cfg;
  ConfigError cerr;
  // bench measures whatever Tmax it is given, bounded or not, and reports the verdict.
  const TmaxLoadOptions any{.allow_unverified = true};
  Status ls = opts.tmax_config.empty() ? load_tmax_config_auto(&cfg, &cerr, any)
                                       : load_tmax_config(opts.tmax_config, &cfg, &cerr, any);
  if (ls != Status::ok) {
    std::string where = opts.tmax_config.empty() ? "$CROSSMOD_TMAX_CONFIG" : opts.tmax_config;
    throw harness::UsageError(
        ls == Status::parse_error || ls == Status::unverified
            ? fmt::format("Tmax config: {}", cerr.to_string())
            : fmt::format("Tmax config {}: {}", where, to_string(ls)));
  }

  harness::Topology topo = harness::Topology::load();
  const TscInfo tsc = tsc_info();
  const CpuIdentity cpu = cpu_identity();
  Env& e = env();
  e.tmax_ticks = cfg.recommended_ticks;
  e.tmax_source = cfg.source;
  e.tmax_is_default = cfg.is_default;
  e.tsc_hz = tsc.hz;
  e.place = [&topo](unsigned executors) {
    const harness::Assignment a = topo.assign(harness::Placement::spread, executors);
    return Placement{a.patcher_pu, a.executor_pus, a.oversubscribed, a.warning};
  };
  e.bind_current_thread = [&topo](int pu, std::string* err) {
    return topo.bind_current_thread(pu, err);
  };
  e.smoke = opts.smoke;
  const unsigned pus = static_cast<unsigned>(topo.pus().size());
  e.max_executors = opts.max_executors ? opts.max_executors : std::max(1u, pus > 0 ? pus - 1 : 1u);
  e.min_time_s = opts.min_time_s > 0 ? opts.min_time_s : 0.5;
  e.throughput_window_s = opts.throughput_window_s > 0 ? opts.throughput_window_s
                                                       : (opts.smoke ? 0.05 : 0.3);
  if (tsc.hz <= 0) throw std::runtime_error("TSC frequency unknown; cannot convert ticks");

  std::string pin_err;
  const Placement& a1 = placement(1);
  const Placement& an = placement(e.max_executors);
  if (!pin_patcher(&pin_err))
    fmt::print(stderr, "crossmod bench: warning: cannot pin the patcher to PU {}: {}\n",
               a1.patcher_pu, pin_err);

  if (opts.list) {
    register_latency_benchmarks();
    register_invoke_benchmarks();
    register_throughput_benchmarks();
    register_tracepoint_benchmarks();
    std::regex re;
    try {
      re = std::regex(opts.filter.empty() ? "." : opts.filter);
    } catch (const std::regex_error& ex) {
      throw harness::UsageError(fmt::format("--filter '{}': {}", opts.filter, ex.what()));
    }
    for (const std::string& name : registered_names())
      if (std::regex_search(name, re)) fmt::print("{}\n", name);
    std::fflush(stdout);
    const int rc = run_probes_child({"--benchmark_list_tests=true"}, opts);
    return rc == 0 || rc == kProbesNoMatch ? 0 : 1;
  }

  // ---- Output paths.
  const std::string slug = machine_slug();
  std::filesystem::path dir =
      opts.out_dir.empty() ? std::filesystem::path("results") / slug : std::filesystem::path(opts.out_dir);
  std::error_code fec;
  std::filesystem::create_directories(dir, fec);
  if (fec) throw std::runtime_error(fmt::format("cannot create {}: {}", dir.string(), fec.message()));
  const std::string stamp = harness::utc_stamp();
  const std::string json_name = fmt::format("bench-{}.json", stamp);
  const std::string json_path = (dir / json_name).string();
  const std::string csv_path = (dir / fmt::format("bench-{}-latency.csv", stamp)).string();
  const std::string summary_path = (dir / fmt::format("bench-{}-summary.json", stamp)).string();
  const std::string probes_json_path = (dir / fmt::format("bench-{}-probes.json", stamp)).string();
  const std::string probes_csv_path =
      (dir / fmt::format("bench-{}-probes-latency.csv", stamp)).string();

  // ---- What shapes the numbers: for people (stdout) and for machines (JSON context).
  fmt::print("crossmod bench: {} ({}), {}\n", cpu.brand, slug, topo.summary());
  fmt::print("  TSC {:.0f} Hz ({}), invariant: {}; virtualised: {}\n", tsc.hz, tsc.source,
             cpu.invariant_tsc ? "yes" : "NO", cpu.hypervisor ? cpu.hypervisor_vendor : "no");
  const std::uint64_t timer_ticks = timer_overhead_ticks();
  fmt::print("  empty rdtscp bracket {} ticks (median; included in, not subtracted from, latency "
             "samples)\n", timer_ticks);
  fmt::print("  Tmax {} ticks ({:.0f} ns) from {}, verdict {}\n", e.tmax_ticks,
             ticks_to_ns(static_cast<double>(e.tmax_ticks)), e.tmax_source, to_string(cfg.verdict));
  fmt::print("  patcher PU {}; executor PUs {} (latency n=1: {}); throughput executors 1..{}\n",
             a1.patcher_pu, join(an.executor_pus), join(a1.executor_pus), e.max_executors);
  fmt::print("  output {}\n", json_path);
  if (e.tmax_is_default) {
    fmt::print(stderr,
               "crossmod bench: WARNING: no calibrated Tmax for {}; using the built-in DEFAULT of "
               "{} ticks. Wordpatch latencies and throughput below are for that default, not "
               "for this machine. Run `crossmod calibrate` or pass --tmax-config.\n",
               slug, e.tmax_ticks);
  }
  if (!e.tmax_is_default && cfg.machine != slug)
    fmt::print(stderr,
               "crossmod bench: WARNING: Tmax config {} was calibrated on '{}', this machine is "
               "'{}'.\n", e.tmax_source, cfg.machine, slug);
  if (an.oversubscribed && !an.warning.empty())
    fmt::print(stderr, "crossmod bench: warning: {}\n", an.warning);

  benchmark::AddCustomContext("crossmod_schema_version", std::to_string(kBenchSchemaVersion));
  benchmark::AddCustomContext("crossmod_version", CROSSMOD_VERSION);
  benchmark::AddCustomContext("machine_slug", slug);
  benchmark::AddCustomContext("cpu_brand", cpu.brand);
  benchmark::AddCustomContext("hypervisor", cpu.hypervisor ? cpu.hypervisor_vendor : "");
  benchmark::AddCustomContext("tsc_hz", fmt::format("{:.0f}", tsc.hz));
  benchmark::AddCustomContext("tsc_source", tsc.source);
  benchmark::AddCustomContext("invariant_tsc", cpu.invariant_tsc ? "true" : "false");
  benchmark::AddCustomContext("rdtscp_bracket_ticks", std::to_string(timer_ticks));
  benchmark::AddCustomContext("cache_line", std::to_string(x86::cache_line_size()));
  benchmark::AddCustomContext("tmax_ticks", std::to_string(e.tmax_ticks));
  benchmark::AddCustomContext("tmax_source", e.tmax_source);
  benchmark::AddCustomContext("tmax_is_default", e.tmax_is_default ? "true" : "false");
  benchmark::AddCustomContext("tmax_machine", cfg.machine);
  benchmark::AddCustomContext("tmax_observed_ticks", std::to_string(cfg.observed_ticks));
  benchmark::AddCustomContext("tmax_verdict", to_string(cfg.verdict));
  benchmark::AddCustomContext("topology", topo.summary());
  benchmark::AddCustomContext("placement", "spread");
  benchmark::AddCustomContext("patcher_pu", std::to_string(a1.patcher_pu));
  benchmark::AddCustomContext("executor_pus", join(an.executor_pus));
  benchmark::AddCustomContext("latency_executor_pus", join(a1.executor_pus));
  benchmark::AddCustomContext("throughput_max_executors", std::to_string(e.max_executors));
  benchmark::AddCustomContext("throughput_window_s", fmt::format("{}", e.throughput_window_s));
  benchmark::AddCustomContext("bench_mode", opts.smoke ? "smoke" : "full");

  register_latency_benchmarks();
  register_invoke_benchmarks();
  register_throughput_benchmarks();
  register_tracepoint_benchmarks();

  // ---- The probes suite first (a child process; nothing if the filter excludes it).
  std::fflush(stdout);
  const int probes_rc = run_probes_child(
      {"--benchmark_out=" + probes_json_path, "--benchmark_out_format=json",
       "--crossmod_latency_csv=" + probes_csv_path},
      opts);
  const bool probes_ran = probes_rc != kProbesNoMatch;
  if (!probes_ran) {
    std::error_code rm;
    std::filesystem::remove(probes_json_path, rm);  // an empty report
  } else if (probes_rc >= 0) {
    fmt::print("wrote {}\nwrote {} (probes suite, exit {})\n", probes_json_path, probes_csv_path,
               probes_rc);
  }
  // The engine suites only if the filter selects any of them.
  bool engine_selected = opts.filter.empty();
  if (!engine_selected) {
    std::regex re;
    try {
      re = std::regex(opts.filter);
    } catch (const std::regex_error& ex) {
      throw harness::UsageError(fmt::format("--filter '{}': {}", opts.filter, ex.what()));
    }
    for (const std::string& name : registered_names())
      engine_selected = engine_selected || std::regex_search(name, re);
  }
  if (!engine_selected) {
    if (!probes_ran)
      throw harness::UsageError(fmt::format("--filter '{}' matches no benchmark", opts.filter));
    release_fixture();
    return probes_rc == 0 ? 0 : 1;
  }

  // ---- Google Benchmark, driven through its own flags.
  std::vector<std::string> args = {"crossmod-bench", "--benchmark_out=" + json_path,
                                   "--benchmark_out_format=json"};
  if (!opts.filter.empty()) args.push_back("--benchmark_filter=" + gb_filter(opts.filter));
  if (opts.min_time_s > 0) args.push_back(fmt::format("--benchmark_min_time={}", opts.min_time_s));
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  benchmark::Initialize(&argc, argv.data());
  if (benchmark::ReportUnrecognizedArguments(argc, argv.data()))
    throw std::runtime_error("Google Benchmark rejected a constructed flag");

  CapturingReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Color
                                                   : benchmark::ConsoleReporter::OO_None);
  JsonReporter json_reporter;
  const std::size_t matched = benchmark::RunSpecifiedBenchmarks(&reporter, &json_reporter);
  release_fixture();
  benchmark::Shutdown();
  if (matched == 0 && !probes_ran)
    throw harness::UsageError(fmt::format("--filter '{}' matches no benchmark", opts.filter));

  const std::size_t rows = write_latency_csv(csv_path);
  fmt::print("wrote {}\nwrote {} ({} latency samples)\n", json_path, csv_path, rows);

  int failed = 0, skipped = 0;
  for (const auto& [name, r] : reporter.runs) {
    // A torn site faulted an executor, which survived it (bench_support.hpp, Executors):
    // the machine tore at this Tmax. A speed benchmark says so and goes on; whether a Tmax
    // is safe is calibrate's and soak's question.
    if (const auto it = r.counters.find("executor_faults"); it != r.counters.end() && it->second.value > 0)
      fmt::print(stderr,
                 "crossmod bench: WARNING: {}: executors ran a torn site {:.0f} time(s) (Tmax {} ticks, "
                 "verdict {}); its call counts miss the interrupted stretches\n",
                 name, it->second.value, e.tmax_ticks, to_string(cfg.verdict));
    if (!r.error_occurred) continue;
    if (r.error_message.rfind(kUnsupportedPrefix, 0) == 0) {
      ++skipped;
    } else {
      ++failed;
      fmt::print(stderr, "crossmod bench: {} failed: {}\n", name, r.error_message);
    }
  }
  if (skipped) fmt::print(stderr, "crossmod bench: {} benchmark(s) skipped as unsupported here\n", skipped);

  if (opts.summary) {
    Summary s = compute_summary(reporter.runs);
    const std::string note = summary_note(cpu);
    print_summary(s, note);
    write_summary(summary_path, s, json_name, note);
    fmt::print("wrote {}\n", summary_path);
  }
  if (e.tmax_is_default)
    fmt::print(stderr, "crossmod bench: WARNING: results used the DEFAULT Tmax ({} ticks), not a "
                       "calibrated one.\n", e.tmax_ticks);
  return failed || (probes_ran && probes_rc != 0) ? 1 : 0;
}

}  // namespace crossmod::bench
