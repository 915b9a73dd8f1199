// Reads the runtime's segment files after the program ended, merges them over process
// images (execve) by (object, name), computes the statistics, and writes the reports.
// Thread safety: single-threaded (the launcher). Never throws on bad segment data: a
// segment that fails validation is skipped with a note.
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <cstring>
#include <fmt/core.h>
#include <map>
#include <sstream>

#include "crossmod/profile_format.hpp"
#include "crossmod/profile_report.hpp"
#include "crossmod/probes.h"

namespace crossmod::profile {
namespace {

const char* provider_name(std::uint32_t p) {
  switch (p) {
    case CROSSMOD_PROVIDER_CYG: return "cyg";
    case CROSSMOD_PROVIDER_PATCHABLE: return "patchable";
    case CROSSMOD_PROVIDER_TRACEPOINT: return "tracepoint";
    default: return "manual";
  }
}

const char* status_name(std::uint64_t s) {
  static const char* const kNames[] = {"ok", "unknown_id", "bytes_changed", "outside_code", "not_writable",
                                       "out_of_range", "busy", "bad_argument", "unsupported", "table_full",
                                       "engine_error"};
  return s < std::size(kNames) ? kNames[s] : "?";
}

struct Mapped {
  void* p = MAP_FAILED;
  std::size_t n = 0;
  ~Mapped() {
    if (p != MAP_FAILED) munmap(p, n);
  }
};

std::string cstr_at(const char* strings, std::uint64_t used, std::uint32_t off) {
  if (off >= used) return "?";
  const char* s = strings + off;
  const std::size_t n = strnlen(s, used - off);
  return std::string(s, n);
}

// "segment 3", "segments 0-37", "segments 0, 2-5": ascending, as the images ran; beyond
// eight ranges (a shell's forks and execs interleave: bash running 30 commands made 153
// segments) "121 segments of 0-152", so that the note stays a line.
std::string segments_text(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  // A fork child that shares its parent's segment writes the parent's number.
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::string o = v.size() == 1 ? "segment " : "segments ";
  std::size_t ranges = 0;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (++ranges > 8) return fmt::format("{} segments of {}-{}", v.size(), v.front(), v.back());
    if (i > 0) o += ", ";
    o += j == i ? fmt::format("{}", v[i]) : fmt::format("{}-{}", v[i], v[j]);
    i = j + 1;
  }
  return o;
}

}  // namespace

ProfileData read_segments(const std::string& raw_dir, const RunInfo& run) {
  ProfileData d;
  std::vector<std::pair<unsigned, std::string>> files;
  if (DIR* dir = opendir(raw_dir.c_str())) {
    while (dirent* e = readdir(dir)) {
      unsigned n = 0;
      char tail[8] = {};
      if (std::sscanf(e->d_name, "segment-%u.%4s", &n, tail) == 2 && std::strcmp(tail, "bin") == 0)
        files.emplace_back(n, raw_dir + "/" + e->d_name);
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    d.notes.push_back(
        "no data file: the program never loaded libcrossmod_profile.so (a static or setuid binary, "
        "LD_PRELOAD removed, or it could not be executed)");

  // First pass: start TSCs, so an image that ended by execve ends where the next begins.
  std::vector<std::unique_ptr<Mapped>> maps;
  std::vector<const Header*> hdrs;
  for (auto& [n, path] : files) {
    auto m = std::make_unique<Mapped>();
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(Header)) {
      if (fd >= 0) close(fd);
      d.notes.push_back(fmt::format("segment-{}.bin: unreadable or truncated, skipped", n));
      continue;
    }
    m->n = static_cast<std::size_t>(st.st_size);
    m->p = mmap(nullptr, m->n, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m->p == MAP_FAILED) {
      d.notes.push_back(fmt::format("segment-{}.bin: cannot map, skipped", n));
      continue;
    }
    // The file is sparse (runtime.cpp, open_segment): read-ahead would zero large folios of
    // holes around every page read (a fork-heavy run has a segment per child).
    (void)madvise(m->p, m->n, MADV_RANDOM);
    const auto* h = static_cast<const Header*>(m->p);
    const Layout l = layout(h->max_funcs, h->max_threads, h->timeline_cap, h->string_bytes);
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0 || h->version != kVersion ||
        h->header_bytes != sizeof(Header) || h->total_bytes != m->n || l.total != m->n ||
        h->nfuncs > h->max_funcs || h->string_used > h->string_bytes) {
      d.notes.push_back(fmt::format("segment-{}.bin: bad magic, version or sizes, skipped", n));
      continue;
    }
    hdrs.push_back(h);
    maps.push_back(std::move(m));
  }

  std::map<std::pair<std::string, std::string>, std::size_t> index;
  // The runtime's one-line note of each image; an exec chain repeats the same line in every
  // image (python3 behind a shell shim: 38 times), so each text is kept once with the
  // segments that wrote it.
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> image_notes;
  const double t0 = hdrs.empty() ? static_cast<double>(run.start_tsc) : static_cast<double>(hdrs[0]->start_tsc);
  for (std::size_t k = 0; k < hdrs.size(); ++k) {
    const Header& h = *hdrs[k];
    const char* base = static_cast<const char*>(maps[k]->p);
    const Layout l = layout(h.max_funcs, h.max_threads, h.timeline_cap, h.string_bytes);
    const auto* funcs = reinterpret_cast<const FuncRecord*>(base + l.funcs);
    const auto* hists = reinterpret_cast<const Hist*>(base + l.hists);
    const auto* threads = reinterpret_cast<const ThreadRecord*>(base + l.threads);
    const auto* timeline = reinterpret_cast<const TimelineEntry*>(base + l.timeline);
    const char* strings = base + l.strings;
    std::uint64_t end = h.end_tsc;
    // Without a clean exit: an image ends where the next (its execve's) begins; a fork's
    // child, which ran beside the others, at its daemon's last wake (else the run's end).
    const bool fork_child = (h.flags & kFlagForkChild) != 0;
    if (end == 0 && fork_child) end = h.alive_tsc != 0 ? h.alive_tsc : run.end_tsc;
    if (end == 0) {
      std::size_t next = k + 1;
      while (next < hdrs.size() && (hdrs[next]->flags & kFlagForkChild) != 0) ++next;
      end = next < hdrs.size() ? hdrs[next]->start_tsc : run.end_tsc;
    }
    if (end < h.start_tsc) end = h.start_tsc;
    const double seg_ticks = static_cast<double>(end - h.start_tsc);
    ++d.segments;
    if (fork_child) ++d.fork_segments;
    d.probes += h.probes;
    d.toggles += h.toggles;
    d.toggle_ticks += h.toggle_ticks;
    d.calib_ticks = std::max(d.calib_ticks, h.calib_ticks);
    if (k == 0)  // the first image's calibration (each image calibrates for itself)
      for (unsigned i = 0; i < 4; ++i) {
        d.self_ticks[i] = h.self_ticks[i];
        d.self_calibrated[i] = (h.flags & (kFlagSelfCalibrated << i)) != 0;
        d.nest_ticks[i] = h.nest_ticks[i];
        d.nest_calibrated[i] = (h.flags & (kFlagNestCalibrated << i)) != 0;
      }
    d.wakes += h.wakes;
    d.wake_cpu_ns += h.wake_cpu_ns;
    d.retract_wakes += h.retract_wakes;
    d.retract_skips += h.retract_skips;
    d.dropped_funcs += h.dropped_funcs;
    d.dropped_threads += h.dropped_threads;
    d.budget_offs += h.budget_offs;
    d.capped_hits += h.capped_hits;
    d.stale_exits += h.stale_exits;
    d.frames_dropped += h.frames_dropped;
    d.forks += h.forks;
    d.retracts += h.retracts;
    d.walks += h.walks;
    d.walked += h.walked;
    d.daemon_cpu_ns += h.daemon_cpu_ns;
    d.setup_cpu_ns += h.setup_cpu_ns;
    d.setup_repaid_ticks += h.setup_repaid_ticks;
    if ((h.flags & kFlagSwitchDetect) != 0) d.switch_detect = true;
    if ((h.flags & kFlagSwitchOff) != 0) d.switch_off = true;
    if (h.switch_errno != 0) d.switch_errno = h.switch_errno;
    if (h.no_exit_funcs > 0)
      d.notes.push_back(fmt::format(
          "segment {}: {} patchable functions may tail-call; their exit probes stay off (calls, no latency): "
          "CROSSMOD_PROFILE_TAILCALL_GUARD is set", h.segment, h.no_exit_funcs));
    if (h.toggle_failures > 0)
      d.notes.push_back(fmt::format("segment {}: {} probe toggles failed (last status: {})", h.segment,
                                    h.toggle_failures, status_name(h.last_failure)));
    for (const char* line : {h.note, h.refusals}) {
      if (line[0] == '\0') continue;
      std::string text(line, strnlen(line, sizeof h.note));
      auto it = std::find_if(image_notes.begin(), image_notes.end(), [&](const auto& x) { return x.first == text; });
      if (it == image_notes.end()) it = image_notes.insert(image_notes.end(), {std::move(text), {}});
      it->second.push_back(h.segment);
    }
    if (h.dropped_funcs > 0)
      d.notes.push_back(fmt::format("segment {}: {} functions beyond the table ({}) were not profiled "
                                    "(--max-functions raises it, up to 65536)",
                                    h.segment, h.dropped_funcs, h.max_funcs));
    d.instr_ticks += h.daemon_instr_ticks;
    d.instr_ticks += static_cast<std::uint64_t>(static_cast<double>(h.setup_cpu_ns) * run.tsc_hz / 1e9);
    const std::uint64_t nt = std::min<std::uint64_t>(h.nthreads, h.max_threads);
    d.threads += h.nthreads;
    for (std::uint64_t i = 0; i < nt; ++i) {
      const ThreadRecord& t = threads[i];
      d.threads_list.push_back({t.tid, h.segment, t.calls, t.samples, t.sum_ticks, t.instr_ticks + t.extra_ticks, t.budget_hits});
      d.instr_ticks += t.instr_ticks + t.extra_ticks;
      d.extra_ticks += t.extra_ticks;
    }
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(h.ntimeline, h.timeline_cap); ++i) {
      const TimelineEntry& e = timeline[i];
      TimelinePoint p;
      p.t_s = run.tsc_hz > 0 ? (static_cast<double>(e.tsc) - t0) / run.tsc_hz : 0;
      // Share of the CPU time the process got in the period (what the budget is a share of).
      p.instr_share = e.cpu_ticks > 0 ? static_cast<double>(e.instr_ticks) / static_cast<double>(e.cpu_ticks) : 0;
      p.active_probes = e.active_probes;
      p.threads = e.threads;
      d.timeline.push_back(p);
    }
    for (std::uint64_t i = 0; i < h.nfuncs; ++i) {
      const FuncRecord& f = funcs[i];
      const std::string name = cstr_at(strings, h.string_used, f.name_off);
      const std::string object = cstr_at(strings, h.string_used, f.object_off);
      auto [it, fresh] = index.try_emplace({object, name}, d.functions.size());
      if (fresh) {
        FunctionStats s;
        s.name = name;
        s.object = object;
        s.provider = provider_name(f.provider);
        s.address = f.function;
        s.exit_probe = false;
        s.hist.assign(kHistBuckets, 0);
        d.functions.push_back(std::move(s));
      }
      FunctionStats& s = d.functions[it->second];
      // An exit probe in any image: one was found (a tracepoint may have none: setjmp-like
      // functions, a process hosting V8; a cyg function's exit hook is found when it first
      // runs) and the opt-in tail-call guard did not keep it off.
      s.exit_probe = s.exit_probe || ((f.flags & kFuncNoExit) == 0 && f.exit_probe != CROSSMOD_NO_PROBE);
      s.always_on = s.always_on && f.offs == 0 && f.state == static_cast<std::uint64_t>(FnState::on) &&
                    f.entry_probe != CROSSMOD_NO_PROBE;
      s.calls_observed += f.calls;
      s.samples += f.samples;
      s.raw_sum_ticks += f.raw_sum_ticks;
      s.uncompensated += f.uncompensated;
      s.fixed_sum += static_cast<std::int64_t>(f.fixed_sum);
      s.blind_exits += f.blind_exits;
      s.discovery_exits += f.discovery_exits;
      s.sw_samples += f.sw_samples;
      s.unk_samples += f.unk_samples;
      s.cold_samples += f.cold_samples;
      s.toggles += f.toggles;
      double active = static_cast<double>(f.active_ticks);
      if (f.on_since != 0 && end > f.on_since) active += static_cast<double>(end - f.on_since);
      active = std::min(active, seg_ticks);
      s.calls_estimated += calls_estimate(f, end);
      s.active_ticks += active;
      s.run_ticks += seg_ticks;
      s.converged = s.converged || f.state == static_cast<std::uint64_t>(FnState::off_converged);
      s.all.add(f.samples, f.sum_ticks, f.all);
      const std::uint64_t off_n = f.sw_samples + f.unk_samples + f.cold_samples,
                          off_s = f.sw_sum_ticks + f.unk_sum_ticks + f.cold_sum_ticks;
      if (f.samples >= off_n && f.sum_ticks >= off_s) s.oncpu.add(f.samples - off_n, f.sum_ticks - off_s, f.oncpu);
      for (unsigned b = 0; b < kHistBuckets; ++b) s.hist[b] += hists[i].n[b];
    }
  }
  for (auto& [text, segs] : image_notes)
    d.notes.push_back(hdrs.size() == 1 ? std::move(text) : segments_text(segs) + ": " + text);
  // A child of _Fork or clone (not glibc's fork) shares its parent's segment (runtime.cpp,
  // own_segment_in_child): what it does is in the totals, under no daemon of its own.
  if (const std::uint64_t shared = d.forks > d.fork_segments ? d.forks - d.fork_segments : 0;
      shared > 0)
    d.notes.push_back(
        fmt::format("{} {} forked without an exec and without glibc's fork (_Fork, clone): {} "
                    "calls and samples are counted with the parent's, and {} has no daemon "
                    "thread, so a function that switched off there stayed off "
                    "(profiler/README.md, Known problems, fork)",
                    shared, shared == 1 ? "process was" : "processes were",
                    shared == 1 ? "its" : "their", shared == 1 ? "it" : "each"));
  // Under budget the set-up is a debt the periods repay from half their cap (runtime.cpp,
  // charge_setup): one the size of the budget's share of the run halved its sampling.
  const double cpu_s = run.user_s + run.sys_s;
  const double setup_share = cpu_s > 0 ? static_cast<double>(d.setup_cpu_ns) / 1e9 / cpu_s : 0.0;
  if (run.policy.name == "budget" && run.policy.budget > 0 && setup_share >= run.policy.budget / 2)
    d.notes.push_back(fmt::format(
        "the runtime's set-up (scan, --trace attach, calibration) took {:.1f}% of the run's CPU time; under "
        "budget later periods repay it with up to half of their budget ({:.0f}% of it repaid), and sample less "
        "meanwhile (overhead.setup_s, setup_repaid_s)",
        100 * setup_share,
        d.setup_cpu_ns > 0 && run.tsc_hz > 0
            ? std::min(100.0, 100.0 * static_cast<double>(d.setup_repaid_ticks) / run.tsc_hz /
                                  (static_cast<double>(d.setup_cpu_ns) / 1e9))
            : 0.0));
  // Raw samples carry their callees' probe costs: a run where many are raw has inflated
  // means, and the table does not show it (a stack of frames that filled up made ~95% of
  // python3's budget samples raw, unnoticed, until 28 Nov).
  {
    std::uint64_t samples = 0, raw = 0;
    for (const FunctionStats& s : d.functions) {
      samples += s.samples;
      raw += s.uncompensated;
    }
    if (samples > 0 && raw * 20 > samples)
      d.notes.push_back(fmt::format("{} of {} samples ({:.1f}%) were timed raw, their callees' probe time "
                                    "included (uncompensated_samples; {} frames dropped)",
                                    raw, samples, 100.0 * static_cast<double>(raw) / static_cast<double>(samples),
                                    d.frames_dropped));
  }
  if (!hdrs.empty() && d.probes == 0)
    d.notes.push_back(
        "no probe sites: build the program with -finstrument-functions or -fpatchable-function-entry=5, "
        "or use --trace");
  return d;
}

namespace {
double percentile(const std::vector<std::uint64_t>& hist, std::uint64_t n, double q) {
  if (n == 0) return 0;
  const double target = q * static_cast<double>(n);
  double cum = 0;
  for (unsigned b = 0; b < hist.size(); ++b) {
    const double c = static_cast<double>(hist[b]);
    if (c > 0 && cum + c >= target) {
      const double lo = static_cast<double>(hist_lower(b));
      const double hi = b + 1 < kHistBuckets ? static_cast<double>(hist_lower(b + 1)) : lo * 1.25;
      return lo + (hi - lo) * std::clamp((target - cum) / c, 0.0, 1.0);
    }
    cum += c;
  }
  return static_cast<double>(hist_lower(kHistBuckets - 1));
}
}  // namespace

void MeanEstimate::add(std::uint64_t n_total, std::uint64_t sum_total, const Batches& b) {
  n += n_total;
  sum += sum_total;
  batches += b.batches;
  s2 += b.sum_s2;
  sn += b.sum_sn;
  n2 += b.sum_n2;
  if (n_total > b.folded_n && sum_total >= b.folded_sum) {
    const double bn = static_cast<double>(n_total - b.folded_n);
    const double bs = static_cast<double>(sum_total - b.folded_sum);
    ++batches;
    s2 += bs * bs;
    sn += bs * bn;
    n2 += bn * bn;
  }
}

// Batch means (ratio estimator): the epochs are the independent units, not the samples,
// which come in bursts of up to --samples per epoch. Var(mean) = sum_b (s_b - m n_b)^2 /
// (B (B-1) nbar^2); t quantile with B-1 degrees of freedom.
void MeanEstimate::finish() {
  has_ci = false;
  if (n == 0) return;
  mean = static_cast<double>(sum) / static_cast<double>(n);
  if (batches < 2) return;
  const double nbar = static_cast<double>(n) / static_cast<double>(batches);
  const double ss = std::max(0.0, s2 - 2 * mean * sn + mean * mean * n2);
  const double se = std::sqrt(ss / (static_cast<double>(batches) * static_cast<double>(batches - 1) * nbar * nbar));
  const boost::math::students_t dist(static_cast<double>(batches - 1));
  const double tq = boost::math::quantile(dist, 0.975);
  lo = mean - tq * se;
  hi = mean + tq * se;
  has_ci = true;
}

void finish_stats(ProfileData* d, const RunInfo& run) {
  const double cpu_ticks = (run.user_s + run.sys_s) * run.tsc_hz;
  for (FunctionStats& s : d->functions) {
    if (s.samples == 0) continue;
    s.all.finish();
    s.oncpu.finish();
    s.mean = s.all.mean;
    s.ci_lo = s.all.lo;
    s.ci_hi = s.all.hi;
    s.has_ci = s.all.has_ci;
    s.p50 = percentile(s.hist, s.samples, 0.5);
    s.p99 = percentile(s.hist, s.samples, 0.99);
    if (cpu_ticks > 0) s.share = s.mean * s.calls_estimated / cpu_ticks;
  }
  std::stable_sort(d->functions.begin(), d->functions.end(), [](const FunctionStats& a, const FunctionStats& b) {
    return a.mean * a.calls_estimated > b.mean * b.calls_estimated;
  });
}

bool never_called(const FunctionStats& s) {
  return s.always_on && s.calls_observed == 0 && s.calls_estimated == 0 && s.samples == 0 && s.blind_exits == 0 &&
         s.discovery_exits == 0;
}

void set_aside_never_called(ProfileData* d, bool list) {
  std::map<std::string, std::uint64_t> by_object;
  std::vector<FunctionStats> kept;
  for (FunctionStats& s : d->functions) {
    if (never_called(s)) {
      ++d->never_called;
      ++by_object[s.object];
      if (list) kept.push_back(std::move(s));
    } else {
      kept.push_back(std::move(s));
    }
  }
  d->functions = std::move(kept);
  d->never_called_listed = list;
  d->never_called_by_object.assign(by_object.begin(), by_object.end());
}

namespace {

nlohmann::json hist_json(const std::vector<std::uint64_t>& hist) {
  // Only the occupied range: edges has one more entry than counts.
  unsigned first = 0, last = 0;
  bool any = false;
  for (unsigned b = 0; b < hist.size(); ++b)
    if (hist[b] != 0) {
      if (!any) first = b;
      last = b;
      any = true;
    }
  nlohmann::json edges = nlohmann::json::array(), counts = nlohmann::json::array();
  if (any) {
    for (unsigned b = first; b <= last; ++b) {
      edges.push_back(hist_lower(b));
      counts.push_back(hist[b]);
    }
    edges.push_back(last + 1 < kHistBuckets ? hist_lower(last + 1) : hist_lower(last) * 2);
  }
  return {{"edges_ticks", edges}, {"counts", counts}};
}

bool matches(const std::string& pattern, const std::string& s) {
  return fnmatch(pattern.c_str(), s.c_str(), 0) == 0;
}

nlohmann::json metric_rows(const ProfileData& d, const MetricSpec& m) {
  nlohmann::json rows = nlohmann::json::array();
  if (m.per == "thread") {
    for (const ThreadStats& t : d.threads_list) {
      if (!matches(m.thread, std::to_string(t.tid))) continue;
      nlohmann::json r = {{"tid", t.tid}, {"segment", t.segment}};
      if (m.kind == "count") {
        r["calls_observed"] = t.calls;
      } else {
        r["samples"] = t.samples;
        r["mean_ticks"] = t.samples ? static_cast<double>(t.sum_ticks) / static_cast<double>(t.samples) : 0.0;
      }
      rows.push_back(r);
    }
    return rows;
  }
  std::uint64_t calls = 0, samples = 0, sum = 0;
  double est = 0;
  std::vector<std::uint64_t> hist(kHistBuckets, 0);
  for (const FunctionStats& s : d.functions) {
    if (!matches(m.functions, s.name) || !matches(m.object, s.object)) continue;
    if (m.per == "function") {
      nlohmann::json r = {{"name", s.name}, {"object", s.object}};
      if (m.kind == "count") {
        r["calls_observed"] = s.calls_observed;
        r["calls_estimated"] = s.calls_estimated;
      } else if (m.kind == "latency") {
        r["samples"] = s.samples;
        r["mean_ticks"] = s.mean;
        r["mean_ci_ticks"] = s.has_ci ? nlohmann::json::array({s.ci_lo, s.ci_hi}) : nlohmann::json();
        r["p50_ticks"] = s.p50;
        r["p99_ticks"] = s.p99;
      } else {
        r["hist"] = hist_json(s.hist);
      }
      rows.push_back(r);
    } else {
      calls += s.calls_observed;
      est += s.calls_estimated;
      samples += s.samples;
      sum += s.all.sum;
      for (unsigned b = 0; b < kHistBuckets; ++b) hist[b] += s.hist[b];
    }
  }
  if (m.per == "total") {
    nlohmann::json r;
    if (m.kind == "count") {
      r = {{"calls_observed", calls}, {"calls_estimated", est}};
    } else if (m.kind == "latency") {
      r = {{"samples", samples},
           {"mean_ticks", samples ? static_cast<double>(sum) / static_cast<double>(samples) : 0.0},
           {"p50_ticks", percentile(hist, samples, 0.5)},
           {"p99_ticks", percentile(hist, samples, 0.99)}};
    } else {
      r = {{"hist", hist_json(hist)}};
    }
    rows.push_back(r);
  }
  return rows;
}

nlohmann::json machine_gaps_json(const RunInfo& run) {
  using nlohmann::json;
  const MachineGaps& g = run.gaps;
  const double hz = run.tsc_hz > 0 ? run.tsc_hz : 1.0;
  return {{"threshold_ticks", g.threshold_ticks},
          {"measured_s", g.spin_ticks / hz},
          {"chunks", g.chunks},
          {"dropped_chunks", g.dropped},
          {"gaps", g.gaps},
          {"per_s", g.spin_ticks > 0 ? static_cast<double>(g.gaps) / (g.spin_ticks / hz) : 0.0},
          {"mean_gap_ticks", g.gaps > 0 ? g.gap_ticks / static_cast<double>(g.gaps) : 0.0},
          {"share", g.share()},
          {"share_upper", g.share_hi()}};
}

}  // namespace

nlohmann::json report_json(const ProfileData& d, const RunInfo& run, const std::vector<MetricSpec>& metrics) {
  using nlohmann::json;
  const double cpu_s = run.user_s + run.sys_s;
  const double cpu_ticks = cpu_s * run.tsc_hz;
  std::uint64_t samples = 0;
  for (const FunctionStats& s : d.functions) samples += s.samples;
  json j;
  j["schema"] = 1;
  j["tool"] = "crossmod profile";
  j["command"] = run.command;
  j["policy"] = {{"name", run.policy.name}, {"budget", run.policy.budget}, {"period_s", run.policy.period_s},
                 {"samples", run.policy.samples}, {"epoch_s", run.policy.epoch_s}, {"ci", run.policy.ci}};
  j["exit"] = {{"kind", run.exit_kind},
               {"status", run.status},
               {"signal", run.signal ? json(run.signal) : json()},
               {"execs", d.segments > d.fork_segments ? d.segments - d.fork_segments - 1 : 0},
               {"forks", d.forks}};
  j["run"] = {{"wall_s", run.wall_s},
              {"cpu_s", cpu_s},
              {"user_s", run.user_s},
              {"sys_s", run.sys_s},
              {"tsc_hz", run.tsc_hz},
              {"threads", d.threads},
              {"switch_detection", switch_detection(d)},
              {"machine_gaps", machine_gaps_json(run)}};
  j["overhead"] = {{"probes", d.probes},
                   {"functions", d.functions.size() + (d.never_called_listed ? 0 : d.never_called)},
                   {"toggles", d.toggles},
                   {"toggles_per_s", run.wall_s > 0 ? static_cast<double>(d.toggles) / run.wall_s : 0.0},
                   {"samples", samples},
                   {"samples_per_s", run.wall_s > 0 ? static_cast<double>(samples) / run.wall_s : 0.0},
                   {"instr_ticks", d.instr_ticks},
                   {"extra_ticks", d.extra_ticks},
                   {"instr_share", cpu_ticks > 0 ? static_cast<double>(d.instr_ticks) / cpu_ticks : 0.0},
                   {"toggle_ticks", d.toggle_ticks},
                   {"toggle_share", cpu_ticks > 0 ? static_cast<double>(d.toggle_ticks) / cpu_ticks : 0.0},
                   {"calib_ticks_per_hit", d.calib_ticks},
                   {"self_ticks", {{"cyg", d.self_calibrated[0] ? json(d.self_ticks[0]) : json()},
                                   {"patchable", d.self_calibrated[1] ? json(d.self_ticks[1]) : json()},
                                   {"tracepoint", d.self_calibrated[3] ? json(d.self_ticks[3]) : json()}}},
                   {"nest_ticks", {{"cyg", d.nest_calibrated[0] ? json(d.nest_ticks[0]) : json()},
                                   {"patchable", d.nest_calibrated[1] ? json(d.nest_ticks[1]) : json()},
                                   {"tracepoint", d.nest_calibrated[3] ? json(d.nest_ticks[3]) : json()}}},
                   {"budget_offs", d.budget_offs},
                   {"capped_hits", d.capped_hits},
                   {"stale_exits", d.stale_exits},
                   {"frames_dropped", d.frames_dropped},
                   {"retracts", d.retracts},
                   {"retract_wakes", d.retract_wakes},
                   {"retract_skips", d.retract_skips},
                   {"wakes", d.wakes},
                   {"wake_cpu_s", static_cast<double>(d.wake_cpu_ns) / 1e9},
                   {"walks", d.walks},
                   {"walked_per_walk", d.walks > 0 ? static_cast<double>(d.walked) / static_cast<double>(d.walks) : 0.0},
                   {"daemon_cpu_s", static_cast<double>(d.daemon_cpu_ns) / 1e9},
                   {"daemon_share", cpu_s > 0 ? static_cast<double>(d.daemon_cpu_ns) / 1e9 / cpu_s : 0.0},
                   {"setup_s", static_cast<double>(d.setup_cpu_ns) / 1e9},
                   {"setup_share", cpu_s > 0 ? static_cast<double>(d.setup_cpu_ns) / 1e9 / cpu_s : 0.0},
                   {"setup_repaid_s", run.tsc_hz > 0 ? static_cast<double>(d.setup_repaid_ticks) / run.tsc_hz : 0.0}};
  json tl = json::array();
  for (const TimelinePoint& p : d.timeline)
    tl.push_back({{"t_s", p.t_s},
                  {"instr_share", p.instr_share},
                  {"budget", run.policy.name == "budget" ? json(run.policy.budget) : json()},
                  {"active_probes", p.active_probes},
                  {"threads", p.threads}});
  j["timeline"] = tl;
  json by_object = json::object();
  for (const auto& [object, n] : d.never_called_by_object) by_object[object] = n;
  j["never_called"] = {{"functions", d.never_called}, {"listed", d.never_called_listed}, {"by_object", by_object}};
  json fs = json::array();
  const bool sw = d.switch_detect;
  for (const FunctionStats& s : d.functions) {
    const bool on = sw && s.oncpu.n > 0;
    fs.push_back(
        {{"name", s.name},
         {"object", s.object},
         {"address", fmt::format("{:#x}", s.address)},
         {"provider", s.provider},
         {"calls_observed", s.calls_observed},
         {"calls_estimated", s.calls_estimated},
         {"samples", s.samples},
         {"mean_ticks", s.samples ? json(s.mean) : json()},
         {"mean_ci_ticks", s.has_ci ? json::array({s.ci_lo, s.ci_hi}) : json()},
         {"raw_mean_ticks",
          s.samples ? json(static_cast<double>(s.raw_sum_ticks) / static_cast<double>(s.samples))
                    : json()},
         {"uncompensated_samples", s.uncompensated},
         {"exits_without_entry", s.blind_exits},
         {"discovery_exits", s.discovery_exits},
         {"switched_samples", sw ? json(s.sw_samples) : json()},
         {"unknown_switch_samples", sw ? json(s.unk_samples) : json()},
         {"cold_samples", s.cold_samples},
         {"oncpu_samples", sw ? json(s.oncpu.n) : json()},
         {"oncpu_mean_ticks", on ? json(s.oncpu.mean) : json()},
         {"oncpu_mean_ci_ticks",
          on && s.oncpu.has_ci ? json::array({s.oncpu.lo, s.oncpu.hi}) : json()},
         {"mean_sys_ticks", s.has_sys() ? json(s.sys()) : json()},
         {"mean_bound_ticks",
          s.has_ci && s.has_sys()
              ? json::array({s.ci_lo - s.sys(), s.ci_hi + s.sys() + gap_term(s.mean, run.gaps)})
              : json()},
         {"oncpu_mean_bound_ticks",
          on && s.oncpu.has_ci && s.has_sys()
              ? json::array(
                    {s.oncpu.lo - s.sys(), s.oncpu.hi + s.sys() + gap_term(s.oncpu.mean, run.gaps)})
              : json()},
         {"p50_ticks", s.samples ? json(s.p50) : json()},
         {"p99_ticks", s.samples ? json(s.p99) : json()},
         {"share", s.share},
         {"batches", s.all.batches},
         {"active_share", s.run_ticks > 0 ? s.active_ticks / s.run_ticks : 0.0},
         {"toggles", s.toggles},
         {"hist", hist_json(s.hist)},
         {"converged", s.converged},
         {"exit_probe", s.exit_probe}});
  }
  j["functions"] = fs;
  json ms = json::array();
  for (const MetricSpec& m : metrics)
    ms.push_back({{"name", m.name},
                  {"kind", m.kind},
                  {"per", m.per},
                  {"focus", {{"functions", m.functions}, {"object", m.object}, {"thread", m.thread}}},
                  {"description", m.description},
                  {"file", m.file},
                  {"rows", metric_rows(d, m)}});
  j["metrics"] = ms;
  json notes = json::array();
  for (const std::string& n : d.notes) notes.push_back(n);
  for (const std::string& n : run.notes) notes.push_back(n);
  j["notes"] = notes;
  return j;
}

std::string switch_detection(const ProfileData& d) {
  if (d.switch_detect) return "perf";
  if (d.switch_off) return "unavailable: off (CROSSMOD_PROFILE_NO_SWITCHES)";
  if (d.switch_errno != 0) return fmt::format("unavailable: perf_event_open: {}", std::strerror(static_cast<int>(d.switch_errno)));
  return "unavailable: no thread was given a perf page (no daemon, or the run ended first)";
}

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}
}  // namespace

std::string report_csv(const ProfileData& d) {
  std::string o =
      "name,object,address,provider,calls_observed,calls_estimated,samples,mean_ticks,mean_ci_lo_ticks,"
      "mean_ci_hi_ticks,p50_ticks,p99_ticks,share,converged,raw_mean_ticks,switched_samples,oncpu_samples,"
      "oncpu_mean_ticks,oncpu_mean_lo_ticks,oncpu_mean_hi_ticks,cold_samples,mean_sys_ticks\n";
  for (const FunctionStats& s : d.functions) {
    auto num = [](bool ok, double v) { return ok ? fmt::format("{:.6g}", v) : std::string(); };
    auto cnt = [](bool ok, std::uint64_t v) { return ok ? std::to_string(v) : std::string(); };
    const bool sw = d.switch_detect, on = sw && s.oncpu.n > 0;
    o += fmt::format("{},{},{:#x},{},{},{:.6g},{},{},{},{},{},{},{:.6g},{},{},{},{},{},{},{},{},{}\n", csv_field(s.name),
                     csv_field(s.object), s.address, s.provider, s.calls_observed, s.calls_estimated, s.samples,
                     num(s.samples > 0, s.mean), num(s.has_ci, s.ci_lo), num(s.has_ci, s.ci_hi),
                     num(s.samples > 0, s.p50), num(s.samples > 0, s.p99), s.share, s.converged ? 1 : 0,
                     num(s.samples > 0, s.samples ? static_cast<double>(s.raw_sum_ticks) / static_cast<double>(s.samples) : 0),
                     cnt(sw, s.sw_samples), cnt(sw, s.oncpu.n), num(on, s.oncpu.mean),
                     num(on && s.oncpu.has_ci, s.oncpu.lo), num(on && s.oncpu.has_ci, s.oncpu.hi), s.cold_samples,
                     num(s.has_sys(), s.sys()));
  }
  return o;
}

// One frame per line (no call stacks are recorded): estimated inclusive ticks. flamegraph.pl
// and speedscope read it; the "flame" is one level deep.
std::string report_folded(const ProfileData& d) {
  std::string o;
  for (const FunctionStats& s : d.functions) {
    if (s.samples == 0) continue;
    std::string name = s.name;
    std::replace(name.begin(), name.end(), ';', ':');
    std::replace(name.begin(), name.end(), ' ', '_');
    const auto v = static_cast<unsigned long long>(std::llround(s.mean * s.calls_estimated));
    if (v > 0) o += fmt::format("{} {}\n", name, v);
  }
  return o;
}

std::string report_table(const ProfileData& d, const RunInfo& run, std::size_t top) {
  std::string o;
  const double cpu_s = run.user_s + run.sys_s;
  std::uint64_t samples = 0;
  for (const FunctionStats& s : d.functions) samples += s.samples;
  o += fmt::format("crossmod profile: policy {}, {} exit {}{}, wall {:.3f} s, cpu {:.3f} s, {} probes, {} functions\n",
                   run.policy.name, run.exit_kind, run.status,
                   run.signal ? fmt::format(" (signal {})", run.signal) : std::string(), run.wall_s, cpu_s, d.probes,
                   d.functions.size() + (d.never_called_listed ? 0 : d.never_called));
  o += fmt::format("  toggles {} ({:.0f}/s), samples {} ({:.0f}/s), instrumentation {:.2f}% of cpu, toggling {:.3f}%, "
                   "daemon thread {:.2f}%, set-up {:.2f}%\n",
                   d.toggles, run.wall_s > 0 ? static_cast<double>(d.toggles) / run.wall_s : 0.0, samples,
                   run.wall_s > 0 ? static_cast<double>(samples) / run.wall_s : 0.0,
                   cpu_s > 0 ? 100.0 * static_cast<double>(d.instr_ticks) / (cpu_s * run.tsc_hz) : 0.0,
                   cpu_s > 0 ? 100.0 * static_cast<double>(d.toggle_ticks) / (cpu_s * run.tsc_hz) : 0.0,
                   cpu_s > 0 ? 100.0 * static_cast<double>(d.daemon_cpu_ns) / 1e9 / cpu_s : 0.0,
                   cpu_s > 0 ? 100.0 * static_cast<double>(d.setup_cpu_ns) / 1e9 / cpu_s : 0.0);
  if (run.gaps.spin_ticks > 0 && run.tsc_hz > 0)
    o += fmt::format(
        "  machine gaps: {:.2f}% of the time ({:.0f}/s, {:.1f} us each; {:.0f} ms measured around "
        "the "
        "run), added to the upper end of mean_bound_ticks\n",
        100 * run.gaps.share(),
        static_cast<double>(run.gaps.gaps) / (run.gaps.spin_ticks / run.tsc_hz),
        run.gaps.gaps > 0
            ? run.gaps.gap_ticks / static_cast<double>(run.gaps.gaps) / run.tsc_hz * 1e6
            : 0.0,
        run.gaps.spin_ticks / run.tsc_hz * 1e3);
  o += fmt::format("  {:>12} {:>14} {:>9} {:>12} {:>10} {:>8} {:>12} {:>7}  {}\n", "calls_obs", "calls_est",
                   "samples", "mean_ticks", "+-95%", "+-sys", "p99_ticks", "share", "function");
  std::size_t k = 0;
  for (const FunctionStats& s : d.functions) {
    if (k++ >= top) break;
    o += fmt::format("  {:>12} {:>14.0f} {:>9} {:>12.0f} {:>10} {:>8} {:>12.0f} {:>6.2f}%  {}\n", s.calls_observed,
                     s.calls_estimated, s.samples, s.mean,
                     s.has_ci ? fmt::format("{:.0f}", (s.ci_hi - s.ci_lo) / 2) : std::string("-"),
                     s.has_sys() ? fmt::format("{:.0f}", s.sys()) : std::string("-"), s.p99, 100 * s.share, s.name);
  }
  if (d.never_called > 0 && !d.never_called_listed)
    o += fmt::format("  {} of the functions were never called (probe on the whole run, no call seen) and are not in "
                     "the report's function list (--all-functions lists them)\n",
                     d.never_called);
  for (const std::string& n : d.notes) o += "  note: " + n + "\n";
  for (const std::string& n : run.notes) o += "  note: " + n + "\n";
  return o;
}

}  // namespace crossmod::profile
