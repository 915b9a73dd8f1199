// The toggling soak (issue 10, "Done when"): 8 threads run the soak program
// (soak_program.inc: a text-indexing pipeline, instrumented with one provider's flags)
// while this thread toggles probes in it at a target of 100 kHz for
// CROSSMOD_PROBES_SOAK_S seconds (default 180), then checks:
//   - no crash, and every result equals the uninstrumented reference copy's;
//   - every call counted once: per process_document call, the probes that stay active
//     (process_document's entry, switched between functions A and B - a data write - and
//     its exit) fired exactly once, and each toggled probe (entry of tokenize with
//     callpatch, top_words with wordpatch sync, checksum with wordpatch async + flush,
//     exit of count_words) at most once; their totals add up.
// Prints the toggle rate achieved and what limited it (the toggler's share of a CPU).
//   probes_soak_pfe [seconds]     (built with -fpatchable-function-entry=5)
//   probes_soak_cyg [seconds]     (built with -finstrument-functions)
// CROSSMOD_PROBES_SOAK_FIFO=1 runs the toggler SCHED_FIFO (needs CAP_SYS_NICE): with 9
// busy threads on few CPUs the default scheduler gives it a small share, not a rate.
// Exit 0: all checks held; 1: a check failed; 2: bad argument.
// Thread safety: probe functions touch only thread-local counters (no allocation, no
// lock); the toggler is the only thread calling the probe API after set-up.
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "crossmod/machine.hpp"
#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"
#include "soak_deps.hpp"
#include "soak_workload.hpp"

namespace soakref {
#include "soak_program.inc"
}  // namespace soakref

namespace cp = crossmod::probes;
namespace x86 = crossmod::x86;

namespace {

constexpr unsigned kThreads = 8;
constexpr double kTargetHz = 100000;

// Roles: what each probe function counts, per thread.
enum Role { kDocA, kDocB, kDocExit, kTokenize, kTopWords, kChecksum, kCountExit, kRoles };
thread_local std::uint64_t t_hits[kRoles];
void hit_doc_a(cp::ProbeId, std::uint64_t) { ++t_hits[kDocA]; }
void hit_doc_b(cp::ProbeId, std::uint64_t) { ++t_hits[kDocB]; }
void hit_doc_exit(cp::ProbeId, std::uint64_t) { ++t_hits[kDocExit]; }
void hit_tokenize(cp::ProbeId, std::uint64_t) { ++t_hits[kTokenize]; }
void hit_top_words(cp::ProbeId, std::uint64_t) { ++t_hits[kTopWords]; }
void hit_checksum(cp::ProbeId, std::uint64_t) { ++t_hits[kChecksum]; }
void hit_count_exit(cp::ProbeId, std::uint64_t) { ++t_hits[kCountExit]; }

struct alignas(64) Result {
  std::uint64_t calls = 0;
  std::uint64_t hits[kRoles] = {};
  std::uint64_t not_once = 0;   // an always-on probe did not fire exactly once in a call
  std::uint64_t twice = 0;      // a toggled probe fired more than once in a call
  std::uint64_t wrong = 0;      // a result differed from the reference
  std::uint64_t checked = 0;
};

cp::ProbeId find(const char* prefix, cp::Kind kind) {
  const std::size_t n = std::strlen(prefix);
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) == cp::Status::ok && pi.kind == kind &&
        std::strncmp(pi.name, prefix, n) == 0 && pi.provider != cp::Provider::manual)
      return id;
  }
  return cp::kNoProbe;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool ok(cp::Status s, const char* what) {
  if (s == cp::Status::ok) return true;
  std::fprintf(stderr, "soak: %s: %s\n", what, cp::to_string(s));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 180;
  if (const char* e = std::getenv("CROSSMOD_PROBES_SOAK_S")) seconds = std::atof(e);
  if (argc > 1) seconds = std::atof(argv[1]);
  if (!(seconds > 0) || argc > 2) {
    std::fprintf(stderr, "usage: %s [seconds > 0] (or CROSSMOD_PROBES_SOAK_S)\n", argv[0]);
    return 2;
  }
  // First call: cyg sites are discovered now (they start on); patchable ones were found
  // by the library's constructor. Then everything off, and the soak's probes on.
  if (soakapp::process_document(1) != soakref::process_document(1)) {
    std::fprintf(stderr, "soak: first result differs from the reference\n");
    return 1;
  }
  if (!ok(cp::deactivate_all(), "deactivate_all")) return 1;
  const cp::ProbeId doc = find("soakapp::process_document", cp::Kind::entry);
  const cp::ProbeId doc_exit = find("soakapp::process_document", cp::Kind::exit);
  const cp::ProbeId tok = find("soakapp::tokenize", cp::Kind::entry);
  const cp::ProbeId top = find("soakapp::top_words", cp::Kind::entry);
  const cp::ProbeId sum = find("soakapp::checksum", cp::Kind::entry);
  const cp::ProbeId cnt_exit = find("soakapp::count_words", cp::Kind::exit);
  for (cp::ProbeId id : {doc, doc_exit, tok, top, sum, cnt_exit}) {
    if (id == cp::kNoProbe) {
      std::fprintf(stderr, "soak: a probe of the soak program was not found (%zu probes)\n", cp::count());
      return 1;
    }
  }
  cp::ProbeInfo pinfo;
  (void)cp::info(doc, &pinfo);
  const char* provider = pinfo.provider == cp::Provider::cyg ? "cyg" : "patchable";
  if (!ok(cp::set_strategy(top, cp::Strategy::wordpatch_sync), "set_strategy top_words") ||
      !ok(cp::set_strategy(sum, cp::Strategy::wordpatch_async), "set_strategy checksum") ||
      !ok(cp::activate(doc, hit_doc_a), "activate process_document") ||
      !ok(cp::activate(doc_exit, hit_doc_exit), "activate process_document exit"))
    return 1;

  std::atomic<bool> go{false}, stop{false};
  std::vector<Result> results(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire)) x86::pause();
      Result& r = results[t];
      std::uint64_t last[kRoles] = {};
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::uint64_t seed = (std::uint64_t{t + 1} << 40) + i;
        const std::uint64_t got = soakapp::process_document(seed);
        ++r.calls;
        std::uint64_t d[kRoles];
        for (unsigned k = 0; k < kRoles; ++k) {
          d[k] = t_hits[k] - last[k];
          last[k] = t_hits[k];
        }
        if (d[kDocA] + d[kDocB] != 1 || d[kDocExit] != 1) ++r.not_once;
        if (d[kTokenize] > 1 || d[kTopWords] > 1 || d[kChecksum] > 1 || d[kCountExit] > 1) ++r.twice;
        if (i % 64 == 0) {  // the reference is as slow as the program: check a sample
          ++r.checked;
          if (got != soakref::process_document(seed)) ++r.wrong;
        }
      }
      for (unsigned k = 0; k < kRoles; ++k) r.hits[k] = t_hits[k];
    });
  }

  // The toggler: one action every 10 us, round-robin over the five toggles.
  const double tsc_hz = crossmod::tsc_info().hz;
  const auto period = static_cast<std::uint64_t>(tsc_hz / kTargetHz);
  const auto total = static_cast<std::uint64_t>(seconds * tsc_hz);
  std::uint64_t toggles = 0, failures = 0, in_api = 0;
  bool a = true, on[4] = {false, false, false, false};
  const char* fifo_env = std::getenv("CROSSMOD_PROBES_SOAK_FIFO");
  const bool fifo = fifo_env != nullptr && std::strcmp(fifo_env, "1") == 0;
  if (fifo) {
    sched_param sp{};
    sp.sched_priority = 1;
    if (const int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); rc != 0) {
      std::fprintf(stderr, "soak: SCHED_FIFO for the toggler: %s\n", std::strerror(rc));
      return 2;
    }
  }
  const double cpu0 = thread_cpu_s();
  go.store(true, std::memory_order_release);
  const std::uint64_t t0 = x86::rdtsc();
  std::uint64_t next = t0;
  unsigned step = 0;
  for (;;) {
    const std::uint64_t now = x86::rdtsc();
    if (now - t0 >= total) break;
    if (now < next) {
      x86::pause();
      continue;
    }
    next += period;
    if (next < now) next = now;  // behind: catch up by at most one period, no burst
    cp::Status s = cp::Status::ok;
    const unsigned k = step++ % 5;
    if (k == 0) {
      a = !a;
      s = cp::activate(doc, a ? hit_doc_a : hit_doc_b);  // active -> active: a data write
    } else {
      const cp::ProbeId ids[4] = {tok, top, sum, cnt_exit};
      const cp::ProbeFn fns[4] = {hit_tokenize, hit_top_words, hit_checksum, hit_count_exit};
      bool& o = on[k - 1];
      o = !o;
      s = o ? cp::activate(ids[k - 1], fns[k - 1]) : cp::deactivate(ids[k - 1]);
      if (s == cp::Status::ok && k == 3) s = cp::flush();  // wordpatch async completes here
    }
    in_api += x86::rdtsc() - now;
    failures += s != cp::Status::ok;
    ++toggles;
  }
  const double wall = static_cast<double>(x86::rdtsc() - t0) / tsc_hz;
  const double cpu = thread_cpu_s() - cpu0;
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : threads) th.join();
  (void)cp::deactivate_all();
  (void)cp::flush();

  Result sum_r;
  for (const Result& r : results) {
    sum_r.calls += r.calls;
    sum_r.not_once += r.not_once;
    sum_r.twice += r.twice;
    sum_r.wrong += r.wrong;
    sum_r.checked += r.checked;
    for (unsigned k = 0; k < kRoles; ++k) sum_r.hits[k] += r.hits[k];
  }
  const double rate = static_cast<double>(toggles) / wall;
  std::printf("soak %s%s: %u threads, %.0f s, %llu calls of process_document (%llu results checked)\n",
              provider, fifo ? " (toggler SCHED_FIFO)" : "", kThreads, wall, static_cast<unsigned long long>(sum_r.calls),
              static_cast<unsigned long long>(sum_r.checked));
  std::printf("  toggles %llu: %.0f/s achieved (target %.0f), %llu failed; toggler got %.0f%% of a CPU, "
              "%.2f us per toggle call, %.0f toggles per toggler CPU-second\n",
              static_cast<unsigned long long>(toggles), rate, kTargetHz,
              static_cast<unsigned long long>(failures), 100.0 * cpu / wall,
              toggles ? static_cast<double>(in_api) / static_cast<double>(toggles) / tsc_hz * 1e6 : 0,
              cpu > 0 ? static_cast<double>(toggles) / cpu : 0);
  std::printf("  always on: entry A %llu + B %llu, exit %llu; toggled: tokenize %llu, top_words %llu, "
              "checksum %llu, count_words exit %llu\n",
              static_cast<unsigned long long>(sum_r.hits[kDocA]), static_cast<unsigned long long>(sum_r.hits[kDocB]),
              static_cast<unsigned long long>(sum_r.hits[kDocExit]),
              static_cast<unsigned long long>(sum_r.hits[kTokenize]),
              static_cast<unsigned long long>(sum_r.hits[kTopWords]),
              static_cast<unsigned long long>(sum_r.hits[kChecksum]),
              static_cast<unsigned long long>(sum_r.hits[kCountExit]));
  std::printf("  calls where an always-on probe did not fire once: %llu; a toggled probe fired twice: "
              "%llu; wrong results: %llu\n",
              static_cast<unsigned long long>(sum_r.not_once), static_cast<unsigned long long>(sum_r.twice),
              static_cast<unsigned long long>(sum_r.wrong));
  bool pass = sum_r.calls > 0 && sum_r.not_once == 0 && sum_r.twice == 0 && sum_r.wrong == 0 &&
              failures == 0 && sum_r.hits[kDocA] + sum_r.hits[kDocB] == sum_r.calls &&
              sum_r.hits[kDocExit] == sum_r.calls;
  for (unsigned k : {kTokenize, kTopWords, kChecksum, kCountExit})
    pass = pass && sum_r.hits[k] > 0 && sum_r.hits[k] < sum_r.calls;
  std::printf("  %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
