// Live attach on real processes: inject attach_marker_lib into attach_target (threads
// blocked in read and clock_nanosleep, two computing workers) and check the library ran
// and every thread finished its work exactly as without the attach; SIGKILL of the
// injector (attach_tool) at each phase; the target dying at each phase; the refusals.
// Skipped with the reason when this machine does not permit ptrace.
// Threads: each test starts its own target process (and for some, attach_tool or a
// tracer process); the test itself is single-threaded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attach/injector.hpp"
#include "attach/proc.hpp"

namespace crossmod::harness::attach {
namespace {

using Fields = std::map<std::string, std::string>;

// Reads one line from fd within timeout_ms ("" on EOF or timeout).
std::string read_line(int fd, int timeout_ms) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char c;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

// "name k1 v1 k2 v2 ..." -> {"name": name, k1: v1, ...}
Fields parse_fields(const std::string& line) {
  std::istringstream in(line);
  Fields f;
  std::string k, v;
  in >> f["name"];
  while (in >> k >> v) f[k] = v;
  return f;
}

pid_t to_pid(const std::string& s) { return static_cast<pid_t>(std::stol(s)); }

// attach_target as a child of the test, stdin and stdout piped.
class Target {
 public:
  explicit Target(std::vector<std::string> argv = {ATTACH_TARGET}) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = out[0];
    ready_ = parse_fields(read_line(out_, 20000));
  }
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  ~Target() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (in_ >= 0) ::close(in_);
    if (out_ >= 0) ::close(out_);
  }

  bool ready() const { return ready_["name"] == "ready"; }
  pid_t pid() const { return pid_; }
  pid_t tid(const std::string& role) const {
    const auto it = ready_.find(role);
    return it == ready_.end() ? 0 : to_pid(it->second);
  }
  void send(const std::string& s) const {
    ASSERT_EQ(::write(in_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  // Closes stdin (the reader sees EOF, the target ends) and returns its report lines by
  // name; *status gets the wait status.
  std::map<std::string, Fields> finish(int* status) {
    ::close(in_);
    in_ = -1;
    std::map<std::string, Fields> out;
    for (std::string l = read_line(out_, 30000); !l.empty(); l = read_line(out_, 30000)) {
      Fields f = parse_fields(l);
      out[f["name"]] = f;
    }
    ::waitpid(pid_, status, 0);
    pid_ = -1;
    return out;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  mutable Fields ready_;
};

// Why ptrace cannot be used here ("" when it can): seize and release a child.
std::string ptrace_unavailable() {
  static const std::string why = [] {
    Target t;
    if (!t.ready()) return std::string("attach_target did not start");
    if (::ptrace(PTRACE_SEIZE, t.tid("reader"), nullptr, nullptr) != 0)
      return "PTRACE_SEIZE of a child fails here (" + std::string(std::strerror(errno)) +
             "): ptrace is not permitted (container seccomp, Yama ptrace_scope 3?)";
    ::ptrace(PTRACE_INTERRUPT, t.tid("reader"), nullptr, nullptr);
    ::waitpid(t.tid("reader"), nullptr, __WALL);
    ::ptrace(PTRACE_DETACH, t.tid("reader"), nullptr, nullptr);
    return std::string();
  }();
  return why;
}

#define SKIP_WITHOUT_PTRACE()                                                      \
  do {                                                                             \
    if (const std::string w = ptrace_unavailable(); !w.empty()) GTEST_SKIP() << w; \
  } while (0)

std::string temp_dir() {
  char tmpl[] = "/tmp/crossmod_attach_XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d != nullptr ? d : "/tmp";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// No thread of `pid` is traced or in a tracing stop.
bool untraced_and_running(pid_t pid) {
  for (const ThreadInfo& th : list_threads(pid))
    if (th.tracer != 0 || th.state == 't') return false;
  return true;
}

InjectRequest marker_request(const std::string& marker, pid_t tid) {
  InjectRequest r;
  r.library = ATTACH_MARKER_LIB;
  r.entry = "crossmod_test_entry";
  r.arg = marker;
  r.tid = tid;
  return r;
}

std::string reference_checksum(const std::string& seed, const std::string& rounds) {
  const std::string cmd = std::string(ATTACH_TARGET) + " --checksum " + seed + " " + rounds;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[64] = {};
  if (p == nullptr || std::fgets(buf, sizeof buf, p) == nullptr) buf[0] = '\0';
  if (p != nullptr) ::pclose(p);
  std::string s(buf);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Every thread of the target did its work as in a run never attached: the workers'
// checksums equal the reference for their round counts, the reader got `data` once and no
// error, no sleep ended early or with an error.
void expect_healthy(const std::map<std::string, Fields>& out, int status, const std::string& data) {
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  for (const char* w : {"worker0", "worker1"}) {
    ASSERT_TRUE(out.count(w)) << w << " line missing";
    const Fields& f = out.at(w);
    EXPECT_EQ(f.at("checksum"), reference_checksum(f.at("seed"), f.at("rounds"))) << w;
  }
  ASSERT_TRUE(out.count("reader"));
  EXPECT_EQ(out.at("reader").at("errors"), "0") << "errno " << out.at("reader").at("errno");
  EXPECT_EQ(out.at("reader").at("data"), data);
  for (const char* s : {"sleeper", "abs_sleeper"}) {
    ASSERT_TRUE(out.count(s));
    EXPECT_EQ(out.at(s).at("short"), "0") << s;
    EXPECT_EQ(out.at(s).at("errors"), "0") << s << " last_error " << out.at(s).at("last_error");
  }
}

void print_report(const char* what, const InjectReport& r) {
  std::printf(
      "[%s] %s\n  stop %lu ns (interrupt->stop %lu), stub %lu ns, release->stub %lu "
      "ns, kept from running %lu ns, load %lu ns, entry %lu ns, total %lu ns\n",
      what, r.thread_choice.c_str(), r.ns.stop_to_release, r.ns.interrupt_to_stop, r.ns.stub,
      r.ns.release_to_stub, r.kept_from_running_ns, r.ns.load, r.ns.entry, r.ns.total);
}

TEST(Attach, BlockedReaderReadsItsDataOnceAfterTheStub) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  const std::string marker = temp_dir() + "/marker";
  InjectReport r;
  ASSERT_EQ(inject_library(t.pid(), marker_request(marker, t.tid("reader")), &r), AttachStatus::ok)
      << r.detail;
  print_report("reader", r);
  EXPECT_EQ(r.tid, t.tid("reader"));
  EXPECT_EQ(r.syscall, SYS_read);
  EXPECT_TRUE(r.restarted);
  EXPECT_EQ(r.tries, 1);
  EXPECT_TRUE(r.entry_called);
  EXPECT_EQ(r.entry_result, 1);
  EXPECT_NE(slurp(marker).find("entry 1 loads 1"), std::string::npos) << slurp(marker);
  t.send("hello\n");
  int status = 0;
  expect_healthy(t.finish(&status), status, "hello\\n");
}

TEST(Attach, SleepersFinishEverySleepAfterTheStub) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  const std::string marker = temp_dir() + "/marker";
  for (const char* who : {"sleeper", "abs_sleeper"}) {
    InjectReport r;
    ASSERT_EQ(inject_library(t.pid(), marker_request(marker, t.tid(who)), &r), AttachStatus::ok)
        << r.detail;
    print_report(who, r);
    EXPECT_EQ(r.syscall, SYS_clock_nanosleep) << who;
    EXPECT_TRUE(r.restarted) << who;
  }
  // Let both sleepers finish sleeps that the attach interrupted.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int status = 0;
  expect_healthy(t.finish(&status), status, "-");
}

TEST(Attach, RunningWorkerKeepsItsRegistersAndOnlyItStops) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  const std::string marker = temp_dir() + "/marker";
  InjectReport r;
  ASSERT_EQ(inject_library(t.pid(), marker_request(marker, t.tid("worker0")), &r), AttachStatus::ok)
      << r.detail;
  print_report("worker0", r);
  int status = 0;
  const auto out = t.finish(&status);
  expect_healthy(out, status, "-");
  const long gap0 = std::stol(out.at("worker0").at("max_gap_ns"));
  const long gap1 = std::stol(out.at("worker1").at("max_gap_ns"));
  std::printf(
      "  heartbeat: worker0 (stopped) longest gap %ld ns; worker1 (never stopped) "
      "longest gap %ld ns\n",
      gap0, gap1);
  // The launcher held worker0 stopped for stop_to_release, then it ran the stub: its
  // heartbeat cannot have ticked during either.
  EXPECT_GE(gap0, static_cast<long>(r.ns.stop_to_release + r.ns.stub));
  EXPECT_LT(gap1, 10'000'000'000L) << "sanity bound only";
}

TEST(Attach, DefaultChoiceIsAThreadBlockedInARestartableWait) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  InjectReport r;
  ASSERT_EQ(inject_library(t.pid(), marker_request(temp_dir() + "/marker", 0), &r),
            AttachStatus::ok)
      << r.detail;
  print_report("default", r);
  EXPECT_TRUE(r.tid == t.tid("reader") || r.tid == t.tid("sleeper") ||
              r.tid == t.tid("abs_sleeper"))
      << r.thread_choice;
  EXPECT_NE(r.thread_choice.find("blocked in"), std::string::npos) << r.thread_choice;
  int status = 0;
  expect_healthy(t.finish(&status), status, "-");
}

TEST(Attach, SecondInjectionReusesTheLoadedLibraryAndTheStub) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  const std::string marker = temp_dir() + "/marker";
  InjectReport a, b;
  ASSERT_EQ(inject_library(t.pid(), marker_request(marker, 0), &a), AttachStatus::ok) << a.detail;
  ASSERT_EQ(inject_library(t.pid(), marker_request(marker, t.tid("worker1")), &b), AttachStatus::ok)
      << b.detail;
  EXPECT_EQ(a.handle, b.handle);
  EXPECT_EQ(a.stub, b.stub);
  EXPECT_EQ(a.entry_result, 1);
  EXPECT_EQ(b.entry_result, 2);
  const std::string m = slurp(marker);
  EXPECT_NE(m.find("entry 1 loads 1"), std::string::npos) << m;
  EXPECT_NE(m.find("entry 2 loads 1"), std::string::npos) << m;
  int status = 0;
  expect_healthy(t.finish(&status), status, "-");
}

TEST(Attach, LoaderAndEntryFailuresCarryDlerrorText) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  const std::string dir = temp_dir();
  InjectRequest req = marker_request(dir + "/marker", 0);
  req.entry = "no_such_entry_point";
  InjectReport r;
  EXPECT_EQ(inject_library(t.pid(), req, &r), AttachStatus::entry_missing);
  EXPECT_NE(r.detail.find("no_such_entry_point"), std::string::npos) << r.detail;
  std::ofstream(dir + "/not_elf.so") << "this is not an ELF file\n";
  req = marker_request(dir + "/marker", 0);
  req.library = dir + "/not_elf.so";
  EXPECT_EQ(inject_library(t.pid(), req, &r), AttachStatus::loader_failed);
  EXPECT_NE(r.detail.find("not_elf.so"), std::string::npos) << r.detail;
  int status = 0;
  expect_healthy(t.finish(&status), status, "-");
}

TEST(Attach, ThreadStoppedInsideLibcIsReleasedUntouched) {
  SKIP_WITHOUT_PTRACE();
  Target t({ATTACH_TARGET, "--libc-spinner"});
  ASSERT_TRUE(t.ready());
  const std::string marker = temp_dir() + "/marker";
  InjectRequest req = marker_request(marker, t.tid("spinner"));
  req.max_tries = 5;
  InjectReport r;
  const AttachStatus s = inject_library(t.pid(), req, &r);
  std::printf("[spinner] %s: %s%s\n", to_string(s), r.detail.c_str(), r.thread_choice.c_str());
  if (s == AttachStatus::no_suitable_thread) {
    // Every stop landed in memset: each was released with its registers untouched.
    EXPECT_EQ(r.tries, 5);
    EXPECT_NE(r.detail.find("libc"), std::string::npos) << r.detail;
    EXPECT_TRUE(slurp(marker).empty());
  } else {
    // A stop may land in the loop around memset, outside libc: then it is safe.
    ASSERT_EQ(s, AttachStatus::ok) << r.detail;
    EXPECT_NE(r.thread_choice.find("running its own code"), std::string::npos);
  }
  EXPECT_TRUE(untraced_and_running(t.pid()));
  int status = 0;
  const auto out = t.finish(&status);
  expect_healthy(out, status, "-");
  ASSERT_TRUE(out.count("spinner"));
  EXPECT_EQ(out.at("spinner").at("errors"), "0");
}

TEST(Attach, TargetInAnotherMountNamespaceLoadsALibraryOnlyItSees) {
  SKIP_WITHOUT_PTRACE();
  if (::geteuid() != 0 || ::access("/usr/bin/unshare", X_OK) != 0)
    GTEST_SKIP() << "needs root and unshare(1) to make a mount namespace";
  const std::string hidden = temp_dir(), marker = temp_dir() + "/marker";
  const std::string lib = hidden + "/only_in_namespace.so";
  // The target's namespace mounts a tmpfs over `hidden` and puts the library there.
  Target t({"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            "mount -t tmpfs crossmod_attach " + hidden + " && cp " + ATTACH_MARKER_LIB + " " + lib +
                " && exec " + ATTACH_TARGET});
  if (!t.ready()) GTEST_SKIP() << "no mount namespace with a tmpfs here";
  ASSERT_NE(::access(lib.c_str(), F_OK), 0) << "the library must be invisible from here";
  InjectRequest req = marker_request(marker, 0);
  req.library = lib;
  InjectReport r;
  ASSERT_EQ(inject_library(t.pid(), req, &r), AttachStatus::ok) << r.detail;
  EXPECT_NE(slurp(marker).find("entry 1 loads 1"), std::string::npos) << slurp(marker);
  int status = 0;
  expect_healthy(t.finish(&status), status, "-");
}

// Runs attach_tool against `t` with CROSSMOD_ATTACH_TEST_DIE_AT=phase; its wait status.
int run_tool_dying_at(const Target& t, pid_t tid, const std::string& marker, const char* phase) {
  const pid_t c = ::fork();
  if (c == 0) {
    ::setenv("CROSSMOD_ATTACH_TEST_DIE_AT", phase, 1);
    const std::string pid = std::to_string(t.pid()), ts = std::to_string(tid);
    ::execl(ATTACH_TOOL, ATTACH_TOOL, "--pid", pid.c_str(), "--tid", ts.c_str(), "--lib",
            ATTACH_MARKER_LIB, "--entry", "crossmod_test_entry", "--arg", marker.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(c, &status, 0);
  return status;
}

class KilledInjector : public ::testing::TestWithParam<const char*> {};

TEST_P(KilledInjector, TargetRunsOnAndFinishesItsWork) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  const std::string marker = temp_dir() + "/marker";
  const int st = run_tool_dying_at(t, t.tid("worker0"), marker, GetParam());
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "tool wait status " << st;
  EXPECT_TRUE(untraced_and_running(t.pid()));
  // From `hijacked` on, the stub needs nothing from the launcher: the library loads.
  const std::string p = GetParam();
  const bool after_hijack = p == "hijacked" || p == "released" || p == "stub_done";
  for (int i = 0; after_hijack && i < 200 && slurp(marker).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  t.send("x");
  int status = 0;
  expect_healthy(t.finish(&status), status, "x");
  EXPECT_EQ(slurp(marker).find("entry 1 loads 1") != std::string::npos, after_hijack)
      << slurp(marker);
}

INSTANTIATE_TEST_SUITE_P(Phases, KilledInjector,
                         ::testing::Values("checked", "seized", "code_written", "stopped",
                                           "frame_written", "hijacked", "released", "stub_done"));

class TargetDies : public ::testing::TestWithParam<AttachPhase> {};

TEST_P(TargetDies, InjectorReportsTargetExited) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  InjectRequest req = marker_request(temp_dir() + "/marker", t.tid("worker0"));
  const pid_t pid = t.pid();
  const AttachPhase at = GetParam();
  req.on_phase = [pid, at](AttachPhase p) {
    if (p == at) ::kill(pid, SIGKILL);
  };
  InjectReport r;
  const AttachStatus s = inject_library(pid, req, &r);
  // Once released, the stub and the loader thread may finish before the kill lands (the
  // launcher can be descheduled for milliseconds): then the attach succeeded first.
  if (at == AttachPhase::released && s == AttachStatus::ok)
    EXPECT_TRUE(r.entry_called);
  else
    EXPECT_EQ(s, AttachStatus::target_exited) << to_string(s) << ": " << r.detail;
  int status = 0;
  t.finish(&status);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

INSTANTIATE_TEST_SUITE_P(Phases, TargetDies,
                         ::testing::Values(AttachPhase::checked, AttachPhase::seized,
                                           AttachPhase::code_written, AttachPhase::stopped,
                                           AttachPhase::frame_written, AttachPhase::hijacked,
                                           AttachPhase::released),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(AttachRefusal, NoSuchProcess) {
  // A child that has been reaped: its pid is free (until the kernel reuses it).
  const pid_t c = ::fork();
  if (c == 0) ::_exit(0);
  ::waitpid(c, nullptr, 0);
  InjectReport r;
  EXPECT_EQ(inject_library(c, marker_request("/tmp/unused", 0), &r), AttachStatus::no_such_process);
  EXPECT_FALSE(r.detail.empty());
}

TEST(AttachRefusal, StaticProgram) {
  SKIP_WITHOUT_PTRACE();
  if (std::string(ATTACH_STATIC_TARGET).empty()) GTEST_SKIP() << "no static libc to build one";
  Target t({ATTACH_STATIC_TARGET});
  ASSERT_EQ(inject_library(t.pid(), marker_request("/tmp/unused", 0), nullptr),
            AttachStatus::static_target);
  InjectReport r;
  (void)inject_library(t.pid(), marker_request("/tmp/unused", 0), &r);
  EXPECT_NE(r.detail.find("statically linked"), std::string::npos) << r.detail;
  EXPECT_TRUE(untraced_and_running(t.pid()));
}

TEST(AttachRefusal, AlreadyTracedTarget) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  // Another process seizes one thread (without stopping it) and holds it.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t tracer = ::fork();
  if (tracer == 0) {
    const long ok = ::ptrace(PTRACE_SEIZE, t.tid("sleeper"), nullptr, nullptr);
    const char c = ok == 0 ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  if (c != 'y') {
    ::kill(tracer, SIGKILL);
    ::waitpid(tracer, nullptr, 0);
    GTEST_SKIP() << "a sibling process may not trace here (Yama ptrace_scope 1?)";
  }
  InjectReport r;
  EXPECT_EQ(inject_library(t.pid(), marker_request("/tmp/unused", 0), &r),
            AttachStatus::already_traced);
  EXPECT_NE(r.detail.find(std::to_string(tracer)), std::string::npos) << r.detail;
  ::kill(tracer, SIGKILL);
  ::waitpid(tracer, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(AttachRefusal, AnotherUserWithoutCapSysPtrace) {
  SKIP_WITHOUT_PTRACE();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  Target t;
  ASSERT_TRUE(t.ready());
  const pid_t c = ::fork();
  if (c == 0) {
    // uid 65534 (nobody): setuid from root drops every capability.
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    InjectReport r;
    const AttachStatus s = inject_library(t.pid(), marker_request("/tmp/unused", 0), &r);
    ::_exit(s == AttachStatus::not_permitted && r.detail.find("another user") != std::string::npos
                ? 0
                : 1);
  }
  int status = 0;
  ::waitpid(c, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(AttachRefusal, BadRequestsAndMissingLibrary) {
  SKIP_WITHOUT_PTRACE();
  Target t;
  ASSERT_TRUE(t.ready());
  InjectRequest req = marker_request("/tmp/unused", 0);
  req.library = "relative/lib.so";
  EXPECT_EQ(inject_library(t.pid(), req, nullptr), AttachStatus::bad_request);
  req = marker_request("/tmp/unused", 0);
  req.entry.clear();
  EXPECT_EQ(inject_library(t.pid(), req, nullptr), AttachStatus::bad_request);
  req = marker_request("/tmp/unused", 0);
  req.library = "/nonexistent/crossmod/lib.so";
  EXPECT_EQ(inject_library(t.pid(), req, nullptr), AttachStatus::library_missing);
  EXPECT_EQ(inject_library(t.tid("reader"), marker_request("/tmp/unused", 0), nullptr),
            AttachStatus::bad_request);  // a thread id, not a process id
  EXPECT_EQ(inject_library(t.pid(), marker_request("/tmp/unused", ::getpid()), nullptr),
            AttachStatus::bad_request);  // a thread of another process
  EXPECT_TRUE(untraced_and_running(t.pid()));
}

}  // namespace
}  // namespace crossmod::harness::attach
