// Cell loop, interrupt handling, progress line and summary table shared by sweep and
// calibrate. The signal handler only touches sig_atomic_t/atomics and makes
// async-signal-safe system calls (getpid, open, read, close, kill, _exit).
#include "runs/sweep.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "results/cluster_stats.hpp"
#include "commands/commands.hpp"
#include "results/stats.hpp"

namespace crossmod::harness {
namespace interrupt {
namespace {

volatile sig_atomic_t g_signal = 0;
pid_t g_parent = 0;

// Writes "/proc/<pid>/task/<pid>/children" into buf without stdio.
void children_path(pid_t pid, char* buf) {
  char digits[24];
  int n = 0;
  auto v = static_cast<unsigned long>(pid);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  char* p = buf;
  auto put = [&p](const char* s) {
    while (*s) *p++ = *s++;
  };
  auto put_pid = [&]() {
    for (int i = n - 1; i >= 0; --i) *p++ = digits[i];
  };
  put("/proc/");
  put_pid();
  put("/task/");
  put_pid();
  put("/children");
  *p = '\0';
}

void on_signal(int sig) {
  const int saved_errno = errno;
  if (getpid() != g_parent) {
    // A cell's child that inherited this handler: behave like the default action.
    _exit(128 + sig);
  }
  if (g_signal != 0) _exit(128 + g_signal);  // second signal: stop now
  g_signal = sig;
  // Kill the running cell's child (the main thread forks cells) so run_cell returns
  // now instead of at the end of the cell; that cell's row is dropped.
  char path[96];
  children_path(g_parent, path);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[512];
    const ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    long pid = 0;
    bool in_number = false;
    for (ssize_t i = 0; i <= len; ++i) {
      const char c = i < len ? buf[i] : ' ';
      if (c >= '0' && c <= '9') {
        pid = pid * 10 + (c - '0');
        in_number = true;
      } else if (in_number) {
        if (pid > 1) kill(static_cast<pid_t>(pid), SIGKILL);
        pid = 0;
        in_number = false;
      }
    }
  }
  errno = saved_errno;
}

}  // namespace

void install() {
  g_parent = getpid();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: the runner's waitpid/poll continue; the child's death wakes it.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool requested() { return g_signal != 0; }
int signal_number() { return g_signal; }
void reset_for_tests() { g_signal = 0; }

}  // namespace interrupt

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  const auto t = static_cast<long>(std::lround(s));
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Resumed find_resume(const std::string& dir, const std::string& kind, const std::string& config_key,
                    const std::string& for_what) {
  Resumed r;
  r.csv = find_resumable(dir, kind, config_key);
  if (!r.csv) {
    fmt::print(stderr, "{}: nothing to resume in {} {}; starting afresh\n", kind, dir, for_what);
    return r;
  }
  try {
    r.rows = read_results_csv(*r.csv);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot resume: {}", e.what()));
  }
  return r;
}

double parse_duration(const std::string& text, const std::string& what) {
  auto bad = [&] {
    return UsageError(fmt::format("{}: '{}' is not a duration (e.g. 2h, 90m, 45s, 1h30m, 10ms)", what, text));
  };
  if (text.empty()) throw bad();
  double total = 0;
  std::size_t i = 0;
  bool any_unit = false;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) ++j;
    if (j == i) throw bad();
    char* end = nullptr;
    const std::string num = text.substr(i, j - i);
    const double v = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size() || !std::isfinite(v)) throw bad();
    if (j == text.size()) {
      if (any_unit) throw bad();  // "1h30" is ambiguous
      total += v;
      break;
    }
    std::size_t k = j;
    while (k < text.size() && std::isalpha(static_cast<unsigned char>(text[k]))) ++k;
    const std::string u = text.substr(j, k - j);
    const double mult = u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 1e-3 : u == "us" ? 1e-6
                        : u == "ns" ? 1e-9 : -1;
    if (mult < 0) throw bad();
    total += v * mult;
    any_unit = true;
    i = k;
  }
  if (!(total > 0)) throw UsageError(fmt::format("{}: the duration must be > 0", what));
  return total;
}

std::string describe_cell(const CellSpec& s) {
  const std::string site = s.straddle == 0 && info(s.protocol).in_one_line
                               ? fmt::format("off={}", s.site_offset)
                               : fmt::format("S={}", s.straddle);
  return fmt::format("{} W={} {} N={} {} rep{}", to_string(s.protocol), s.wait_ticks, site,
                     s.executors, placement_name(s.placement), s.rep);
}

Progress::Progress(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

void Progress::show(const std::string& position, const CellSpec& spec,
                    std::uint64_t failures_so_far, std::optional<double> eta_s) {
  if (!enabled_) return;
  const std::string line =
      fmt::format("cell {}  {} | failures so far {} | ETA {}", position, describe_cell(spec),
                  failures_so_far, eta_s ? format_duration(*eta_s) : std::string("?"));
  if (tty_) {
    fmt::print(stderr, "\r{}\x1b[K", line);
    dirty_ = true;
  } else {
    fmt::print(stderr, "{}\n", line);
  }
  std::fflush(stderr);
}

void Progress::message(const std::string& line) {
  if (tty_ && dirty_) {
    fmt::print(stderr, "\r\x1b[K");
    dirty_ = false;
  }
  fmt::print(stderr, "{}\n", line);
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_ && dirty_) fmt::print(stderr, "\n");
  dirty_ = false;
}

CellLoop::CellLoop(ResultsWriter* writer, CellRunner runner, double tsc_hz,
                   std::vector<ResultRow> resumed, Progress* progress)
    : writer_(writer), runner_(std::move(runner)), tsc_hz_(tsc_hz), progress_(progress) {
  for (auto& r : resumed) resumed_.emplace(resume_key(r), std::move(r));
}

bool CellLoop::is_resumed(const CellSpec& spec) const {
  return resumed_.count(resume_key(spec)) != 0;
}

std::optional<ResultRow> CellLoop::run(const CellSpec& spec, const std::string& position,
                                       std::optional<double> eta_s) {
  if (interrupt::requested()) return std::nullopt;
  if (const auto it = resumed_.find(resume_key(spec)); it != resumed_.end()) {
    ++cells_resumed_;
    rows_.push_back(it->second);
    failures_ += it->second.failures;
    return it->second;
  }
  if (progress_) progress_->show(position, spec, failures_, eta_s);
  const CellResult result = runner_(spec);
  // The child of an interrupted cell was killed: its result is not a measurement.
  if (interrupt::requested()) return std::nullopt;
  ResultRow row = row_from_result(result, 0, tsc_hz_);
  if (writer_) writer_->append(row);
  ++cells_run_;
  failures_ += row.failures;
  if (progress_ && (row.crash || row.hang || row.outcome == to_string(Outcome::error) || row.outcome == to_string(Outcome::blind))) {
    progress_->message(fmt::format("  cell {}: {} ({})", describe_cell(spec), row.outcome, row.note));
  }
  rows_.push_back(row);
  return row;
}

void EtaModel::add(const ResultRow& row) {
  auto& p = per_protocol_[row.protocol];
  p.first += row.duration_s;
  p.second += static_cast<double>(row.toggles);
  seconds_ += row.duration_s;
  toggles_ += static_cast<double>(row.toggles);
}

std::optional<double> EtaModel::estimate(const CellSpec& spec) const {
  const auto it = per_protocol_.find(to_string(spec.protocol));
  double s = seconds_, t = toggles_;
  if (it != per_protocol_.end() && it->second.second > 0) std::tie(s, t) = it->second;
  if (t <= 0) return std::nullopt;
  return s / t * static_cast<double>(spec.toggles);
}

std::vector<std::string> placement_warnings(const SweepConfig& cfg, const Topology& topo) {
  std::vector<std::string> warnings;
  for (Placement p : cfg.placements) {
    for (unsigned n : cfg.executors) {
      try {
        const Assignment a = topo.assign(p, n);
        if (!a.warning.empty()) warnings.push_back(fmt::format("{} N={}: {}", placement_name(p), n, a.warning));
      } catch (const std::invalid_argument& e) {
        throw UsageError(fmt::format("placement {} with {} executors is impossible on this machine ({}): {}",
                                     placement_name(p), n, topo.summary(), e.what()));
      }
    }
  }
  return warnings;
}

CellResult run_cell_for(const CellSpec& spec, const CellEnv& ctx, bool inject_control_failure) {
  if (!inject_control_failure || spec.protocol != Protocol::callpatch) return run_cell(spec, ctx);
  CellSpec torn = spec;
  torn.protocol = Protocol::selftest_torn;
  CellResult r = run_cell(torn, ctx);
  r.spec = spec;
  r.note = "failure injected by --inject-control-failure (ran selftest-torn); " + r.note;
  return r;
}

void print_negative_control_banner(const std::string& command, const std::vector<std::string>& failed,
                                   const std::string& consequence, const std::string& details) {
  const std::string rule(60, '*');
  fmt::print(stderr, "\n{0}: {1}\n{0}: A NEGATIVE CONTROL FAILED. Protocols that must never fail did:\n", command, rule);
  for (const auto& f : failed) fmt::print(stderr, "{}:   {}\n", command, f);
  fmt::print(stderr, "{0}: The engine, the harness or this machine is broken; {1}\n", command, consequence);
  fmt::print(stderr, "{0}: Details: {1}\n{0}: {2}\n", command, details, rule);
}

std::vector<std::string> failed_negative_controls(const std::vector<ResultRow>& rows) {
  std::vector<std::string> out;
  for (const ProtocolInfo& p : all_protocols()) {
    if (p.role != ControlRole::negative) continue;
    const std::string proto = p.name;
    std::uint64_t failures = 0, cells = 0;
    for (const auto& r : rows) {
      if (r.protocol != proto || !r.failed()) continue;
      failures += r.failures;
      ++cells;
    }
    if (cells) out.push_back(fmt::format("{}: {} failing toggles in {} cells", proto, failures, cells));
  }
  return out;
}

namespace {
std::size_t distinct_rounds(const std::vector<stats::RoundCount>& counts) {
  std::set<std::uint64_t> r;
  for (const auto& c : counts) r.insert(c.round);
  return r.size();
}
}  // namespace

std::string summary_table(const std::vector<ResultRow>& rows) {
  struct Agg {
    std::uint64_t cells = 0, toggles = 0, exposed = 0, failures = 0, crash = 0, hang = 0,
                  low = 0;
  };
  std::map<std::tuple<std::string, std::string, std::uint64_t>, Agg> groups;
  for (const auto& r : rows) {
    auto& a = groups[{r.phase, r.protocol, r.wait_ticks}];
    ++a.cells;
    a.toggles += r.toggles;
    a.exposed += r.exposed_toggles;
    a.failures += r.failures;
    a.crash += r.crash;
    a.hang += r.hang;
    a.low += r.low_exposure;
  }
  std::string out = fmt::format("{:<8} {:<10} {:>7} {:>5} {:>12} {:>12} {:>8} {:>5} {:>4} {:>4}  {}\n",
                                "phase", "protocol", "W", "cells", "toggles", "exposed",
                                "failures", "crash", "hang", "low", "failure rate per exposed toggle (95%)");
  for (const auto& [k, a] : groups) {
    const auto& [phase, proto, w] = k;
    // Tears come in bursts: when rows carry rounds and the counts vary across them more
    // than a binomial allows, an i.i.d. interval would be a false claim (issue 9).
    std::vector<stats::RoundCount> counts;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.phase != phase || r.protocol != proto || r.wait_ticks != w || r.round < 0) continue;
      counts.push_back({static_cast<std::uint64_t>(r.round), r.failures, r.low_exposure ? 0 : r.exposed_toggles, false});
    }
    const stats::Overdispersion od = stats::overdispersion_test(counts);
    std::string rate;
    if (a.exposed == 0) {
      rate = "no exposed toggles";
    } else if (a.failures == 0) {
      rate = counts.empty() ? fmt::format("0 in {}, p < {:.3g} if toggles were independent", a.exposed,
                                          stats::zero_failure_upper_bound(a.exposed))
                            : fmt::format("0 in {} ({} rounds)", a.exposed, distinct_rounds(counts));
    } else if (od.overdispersed) {
      rate = fmt::format("{:.3g}, bursty (dispersion {:.0f}): < {:.3g} with rounds as units",
                         stats::rate(a.failures, a.exposed), od.dispersion, stats::cluster_upper_bound(counts).upper);
    } else {
      const auto ci = stats::clopper_pearson(std::min(a.failures, a.exposed), a.exposed);
      rate = fmt::format("{:.3g} [{:.3g}, {:.3g}]", stats::rate(a.failures, a.exposed), ci.lower, ci.upper);
    }
    out += fmt::format("{:<8} {:<10} {:>7} {:>5} {:>12} {:>12} {:>8} {:>5} {:>4} {:>4}  {}\n", phase,
                       proto, w, a.cells, a.toggles, a.exposed, a.failures, a.crash, a.hang, a.low,
                       rate);
  }
  return out;
}

}  // namespace crossmod::harness
