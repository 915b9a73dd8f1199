// attach_tool: live attach's injector by hand (a test tool, not the user-facing
// `crossmod trace --pid`):
//   attach_tool --pid PID --lib /abs/lib.so --entry SYMBOL [--arg TEXT] [--tid TID]
//               [--timeout-ms N]
// Prints the InjectReport as "key value" lines on stdout and exits 0 on success; a bad
// command line or a refusal (nothing changed in the target) is one line on stderr and
// exit 2; a failure after the target was touched is one line and exit 1.
// Test hook: CROSSMOD_ATTACH_TEST_DIE_AT=<phase> (a name from to_string(AttachPhase))
// makes the tool SIGKILL itself when the injector reaches that phase, as a crash there
// would. Single-threaded.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attach/injector.hpp"

namespace {

using crossmod::harness::attach::AttachPhase;
using crossmod::harness::attach::AttachStatus;
using crossmod::harness::attach::InjectReport;
using crossmod::harness::attach::InjectRequest;

int usage(const char* why) {
  std::fprintf(stderr,
               "attach_tool: %s (usage: attach_tool --pid PID --lib /abs/lib.so "
               "--entry SYMBOL [--arg TEXT] [--tid TID] [--timeout-ms N])\n",
               why);
  return 2;
}

bool parse_long(const char* s, long* v) {
  char* end = nullptr;
  errno = 0;
  *v = std::strtol(s, &end, 10);
  return errno == 0 && end != s && *end == '\0' && *v > 0;
}

void print_report(const InjectReport& r) {
  std::printf("tid %d\nthread_choice %s\ntries %d\nsyscall %ld\nrestarted %d\n", r.tid,
              r.thread_choice.c_str(), r.tries, r.syscall, r.restarted ? 1 : 0);
  std::printf("stub %#lx %s\nregion %#lx\nhandle %#lx\nentry_called %d\nentry_result %d\n", r.stub,
              r.stub_object.c_str(), r.region, r.handle, r.entry_called ? 1 : 0, r.entry_result);
  std::printf(
      "ns.checks %lu\nns.interrupt_to_stop %lu\nns.stop_to_release %lu\n"
      "ns.release_to_stub %lu\nns.stub %lu\nns.load %lu\nns.entry %lu\nns.total %lu\n"
      "kept_from_running_ns %lu\n",
      r.ns.checks, r.ns.interrupt_to_stop, r.ns.stop_to_release, r.ns.release_to_stub, r.ns.stub,
      r.ns.load, r.ns.entry, r.ns.total, r.kept_from_running_ns);
}

bool refusal(AttachStatus s) {
  switch (s) {
    case AttachStatus::bad_request:
    case AttachStatus::no_such_process:
    case AttachStatus::not_permitted:
    case AttachStatus::already_traced:
    case AttachStatus::not_x86_64:
    case AttachStatus::static_target:
    case AttachStatus::no_loader:
    case AttachStatus::library_missing:
    case AttachStatus::target_stopped:
    case AttachStatus::no_code_cave:
    case AttachStatus::no_suitable_thread:
      return true;
    default:
      return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  InjectRequest req;
  long pid = 0, v = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing value after " + a).c_str());
    const char* val = argv[++i];
    if (a == "--pid" && parse_long(val, &v))
      pid = v;
    else if (a == "--tid" && parse_long(val, &v))
      req.tid = static_cast<pid_t>(v);
    else if (a == "--timeout-ms" && parse_long(val, &v))
      req.timeout = std::chrono::milliseconds(v);
    else if (a == "--lib")
      req.library = val;
    else if (a == "--entry")
      req.entry = val;
    else if (a == "--arg")
      req.arg = val;
    else
      return usage(("bad option or value: " + a + " " + val).c_str());
  }
  if (pid == 0 || req.library.empty() || req.entry.empty())
    return usage("--pid, --lib and --entry are required");
  if (const char* die = std::getenv("CROSSMOD_ATTACH_TEST_DIE_AT")) {
    const std::string at = die;
    req.on_phase = [at](AttachPhase p) {
      if (at == crossmod::harness::attach::to_string(p)) ::raise(SIGKILL);
    };
  }
  InjectReport report;
  const AttachStatus s =
      crossmod::harness::attach::inject_library(static_cast<pid_t>(pid), req, &report);
  if (s != AttachStatus::ok) {
    std::fprintf(stderr, "attach_tool: %s: %s\n", crossmod::harness::attach::to_string(s),
                 report.detail.c_str());
    return refusal(s) ? 2 : 1;
  }
  print_report(report);
  return 0;
}
