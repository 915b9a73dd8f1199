// Live attach injector (issue 41): loads a library into a running process through its own
// dynamic loader while stopping one thread for microseconds.
//
// Design, in the order inject_library runs it:
//  1. Checks from /proc only (nothing changes): the process exists, its executable is a
//     dynamically linked x86-64 ELF, no thread is traced, ptrace's permission rules
//     (uids, CAP_SYS_PTRACE, Yama) allow it, it is not job-control stopped; dlopen,
//     dlsym, dlerror, pthread_create and pthread_detach are found in its libc from the
//     tables mapped in its memory (no file is opened: mount namespaces and deleted files
//     do not matter); the library exists under /proc/PID/root; a code cave and a free
//     address for the region exist.
//  2. Seize one thread (PTRACE_SEIZE: it keeps running) and copy the stub into the cave:
//     the zero padding after an executable segment, which no code reaches. A page the
//     target maps itself would need a first hijack just to create it; the padding needs
//     none, and a later injection finds the same bytes there and reuses them.
//  3. PTRACE_INTERRUPT that thread and judge where it stopped (thread_stop.hpp): blocked
//     in a restartable wait, or in its own code, is safe; inside libc or ld.so it may
//     hold a lock pthread_create needs, so it is released and another stop tried.
//  4. Write the frame (frame.hpp) below its red zone, then one PTRACE_SETREGS changing
//     rip (the stub), rsp (the frame) and orig_rax (-1: the kernel must not rewind rip
//     for a syscall restart at the stub's address), then PTRACE_DETACH. rsp moves too so
//     that a signal delivered before the stub's first instruction pushes its frame below
//     the launcher's data instead of over it.
//  5. The stub, on that thread: saves rflags, the general registers and the extended
//     state, maps the region at the launcher's address (MAP_FIXED_NOREPLACE), copies the
//     image there, pthread_create()s the loader thread, restores everything and returns
//     to the resume point: the interrupted syscall re-entered as the kernel would have
//     (thread_stop.hpp, resume_point). The signal mask is never changed: the stop is a
//     ptrace trap, not a signal, so no handler frame altered it, and pthread_create
//     restores the mask it blocks around clone.
//  6. The loader thread runs dlopen, dlsym and ENTRY; a lock any thread holds only
//     delays it. The launcher polls the region (/proc/PID/mem) for the results.
// Kill safety: before SETREGS nothing the thread runs has changed (the stop ends when the
// kernel detaches a dead tracer's tracees, and the thread resumes as it was); after it,
// the stub needs nothing from the launcher. So crossmod may die at any instruction.
// Compared with others: Frida's Linux injector (frida-core src/linux/frida-helper-
// backend.vala, RemoteCallBuilder) keeps the thread stopped across remote calls (mmap,
// its bootstrapper, its loader) that each return to DUMMY_RETURN_ADDRESS for the helper
// to catch: a helper that dies mid-call leaves the thread to fault there. linux-inject
// (inject-x86_64.c) stops the whole process with PTRACE_ATTACH's SIGSTOP, overwrites the
// start of its first executable mapping with code ending in int3, and restores it after;
// gdb stops every thread for an inferior call.
// Thread safety: see injector.hpp.
#include "attach/injector.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "attach/clock.hpp"
#include "attach/frame.hpp"
#include "attach/proc.hpp"
#include "attach/remote_elf.hpp"
#include "attach/stub_layout.h"
#include "attach/thread_stop.hpp"

namespace crossmod::harness::attach {

static_assert(ATTACH_SYS_MMAP == SYS_mmap && ATTACH_SYS_MUNMAP == SYS_munmap &&
              ATTACH_SYS_CLOCK_GETTIME == SYS_clock_gettime);
static_assert(ATTACH_CLOCK_MONOTONIC == CLOCK_MONOTONIC && ATTACH_EEXIST == EEXIST);
static_assert(ATTACH_PROT_RW == (PROT_READ | PROT_WRITE));
static_assert(ATTACH_MAP_FLAGS == (MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE));
static_assert(ATTACH_RET_POP == ATTACH_RESUME_BELOW - 8 && ATTACH_STATE_BELOW > ATTACH_RED_ZONE);
static_assert(ATTACH_R_STRINGS >= ATTACH_R_ERROR + ATTACH_R_ERROR_CAP);

namespace {

// Everything found about the target before anything changes.
struct Target {
  pid_t pid = 0;
  ProcStatus status;
  bool caller_is_parent = false;
  std::vector<Mapping> maps;
  std::vector<LoadedObject> objects;  // loader objects first
  RemoteMem mem;                      // read-only, /proc/PID/mem
  LoaderAddrs addrs;
  std::vector<TextRange> loader_text;
  CodeCave cave;
  std::uintptr_t region = 0;
  std::size_t region_size = 0;
  std::vector<std::uint8_t> image;
  std::uint64_t cookie = 0;
  std::size_t stack_needed = 0;  // what the stub's frame, saves and calls take (frame.hpp)
  XsaveInfo xsave;
};

struct Timeline {
  std::uint64_t start = 0, interrupt = 0, stop = 0, release = 0;
};

AttachStatus fail(InjectReport* r, AttachStatus s, std::string detail) {
  r->detail = std::move(detail);
  return s;
}

void phase(const InjectRequest& req, AttachPhase p) {
  if (req.on_phase) req.on_phase(p);
}

bool process_gone(pid_t pid) {
  const auto st = read_status(fmt::format("/proc/{}/status", pid));
  return !st || st->state == 'Z' || st->state == 'X';
}

// Objects that hold the dynamic loader's functions, in lookup order.
bool is_loader_object(std::string_view base) {
  for (const char* p : {"libc.so", "libc-", "ld-linux", "ld-musl", "libdl.so", "libpthread.so"})
    if (base.starts_with(p)) return true;
  return false;
}

AttachStatus validate(const InjectRequest& req, InjectReport* rep) {
  if (req.library.empty() || req.library.front() != '/')
    return fail(rep, AttachStatus::bad_request,
                "the library path must be absolute (it is opened by the target, from its "
                "working directory and mount namespace)");
  if (req.entry.empty()) return fail(rep, AttachStatus::bad_request, "no entry symbol given");
  if (req.library.size() > kMaxPath || req.entry.size() > kMaxEntry || req.arg.size() > kMaxArg)
    return fail(rep, AttachStatus::bad_request,
                fmt::format("library path, entry or argument too long (limits {}, {}, {})",
                            kMaxPath, kMaxEntry, kMaxArg));
  if (req.library.find('\0') != std::string::npos || req.entry.find('\0') != std::string::npos ||
      req.arg.find('\0') != std::string::npos)
    return fail(rep, AttachStatus::bad_request, "a string contains a NUL byte");
  return AttachStatus::ok;
}

std::string permission_facts_problem(const Target& t, bool* certain = nullptr) {
  PermissionFacts f;
  f.target = t.status;
  if (const auto self = read_status("/proc/self/status")) f.self = *self;
  f.yama = yama_scope();
  f.target_is_descendant = is_descendant(t.pid, ::getpid());
  bool sure = false;
  std::string why = permission_problem(f, &sure);
  if (certain != nullptr) *certain = sure;
  return why;
}

AttachStatus check_process(pid_t pid, const InjectRequest& req, Target* t, InjectReport* rep) {
  t->pid = pid;
  const auto st = read_status(fmt::format("/proc/{}/status", pid));
  if (!st) return fail(rep, AttachStatus::no_such_process, fmt::format("no process {}", pid));
  t->status = *st;
  if (st->tgid != pid)
    return fail(rep, AttachStatus::bad_request,
                fmt::format("{} is a thread of process {}: give the process id", pid, st->tgid));
  if (pid == ::getpid()) return fail(rep, AttachStatus::bad_request, "cannot attach to itself");
  if (req.tid != 0 && ::access(fmt::format("/proc/{}/task/{}", pid, req.tid).c_str(), F_OK) != 0)
    return fail(rep, AttachStatus::bad_request,
                fmt::format("thread {} is not a thread of process {}", req.tid, pid));
  if (st->state == 'Z' || st->state == 'X')
    return fail(rep, AttachStatus::target_exited, fmt::format("process {} has exited", pid));
  t->caller_is_parent = st->ppid == ::getpid();
  std::string why;
  const ExeKind kind = classify_exe(pid, &why);
  const int exe_errno = errno;
  switch (kind) {
    case ExeKind::dynamic_program:
      break;
    case ExeKind::static_program:
      return fail(rep, AttachStatus::static_target, why);
    case ExeKind::unreadable: {
      if (exe_errno == ENOENT && process_gone(pid))
        return fail(rep, AttachStatus::target_exited, "the process exited");
      const std::string p = permission_facts_problem(*t);
      if (exe_errno == EACCES || exe_errno == EPERM || !p.empty())
        return fail(rep, AttachStatus::not_permitted, p.empty() ? why : p);
      return fail(rep, AttachStatus::not_x86_64, why);
    }
    default:
      return fail(rep, AttachStatus::not_x86_64, why);
  }
  const std::vector<ThreadInfo> threads = list_threads(pid);
  for (const ThreadInfo& th : threads)
    if (th.tracer != 0)
      return fail(rep, AttachStatus::already_traced,
                  fmt::format("thread {} is traced by process {} (a debugger or strace?)", th.tid,
                              th.tracer));
  bool certain = false;
  if (const std::string p = permission_facts_problem(*t, &certain); !p.empty() && certain)
    return fail(rep, AttachStatus::not_permitted, p);
  if (!threads.empty() && std::all_of(threads.begin(), threads.end(), [](const ThreadInfo& x) {
        return x.state == 'T' || x.state == 'Z';
      }))
    return fail(rep, AttachStatus::target_stopped,
                "the process is stopped by a signal (SIGSTOP?): continue it (SIGCONT) first");
  return AttachStatus::ok;
}

AttachStatus find_loader(Target* t, InjectReport* rep) {
  t->mem = RemoteMem::open(fmt::format("/proc/{}", t->pid), false);
  if (!t->mem.valid()) {
    if (errno == ENOENT) return fail(rep, AttachStatus::target_exited, "the process exited");
    const std::string p = permission_facts_problem(*t);
    return fail(rep, AttachStatus::not_permitted,
                fmt::format("cannot open /proc/{}/mem ({}){}", t->pid, std::strerror(errno),
                            p.empty() ? "" : ": " + p));
  }
  t->maps = read_maps(t->pid);
  t->objects = loaded_objects(t->mem, t->maps);
  std::stable_partition(t->objects.begin(), t->objects.end(), [](const LoadedObject& o) {
    return is_loader_object(object_basename(o.path));
  });
  const std::pair<const char*, std::uintptr_t*> wanted[] = {
      {"dlopen", &t->addrs.dlopen},
      {"dlsym", &t->addrs.dlsym},
      {"dlerror", &t->addrs.dlerror},
      {"pthread_create", &t->addrs.pthread_create},
      {"pthread_detach", &t->addrs.pthread_detach}};
  for (const auto& [name, out] : wanted) {
    for (const LoadedObject& o : t->objects) {
      if (!is_loader_object(object_basename(o.path))) break;
      if (const auto a = find_dynamic_symbol(t->mem, o, name)) {
        *out = *a;
        break;
      }
    }
    if (*out == 0)
      return fail(rep, AttachStatus::no_loader,
                  fmt::format("no {} in the target's libc or loader (glibc 2.34+ has dlopen "
                              "in libc.so.6; older ones need libdl loaded)",
                              name));
  }
  for (const LoadedObject& o : t->objects) {
    if (!is_loader_object(object_basename(o.path))) break;
    for (const Mapping& m : o.maps)
      if (m.exec) t->loader_text.push_back({m.start, m.end});
  }
  rep->dlopen = t->addrs.dlopen;
  return AttachStatus::ok;
}

AttachStatus find_places(Target* t, const InjectRequest& req, InjectReport* rep) {
  struct stat sb;
  const std::string seen = fmt::format("/proc/{}/root{}", t->pid, req.library);
  if (::stat(seen.c_str(), &sb) != 0 && errno == ENOENT)
    return fail(
        rep, AttachStatus::library_missing,
        fmt::format("{} does not exist in the target's filesystem ({})", req.library, seen));
  const auto cave = find_code_cave(t->mem, t->objects, stub_blob());
  if (!cave)
    return fail(rep, AttachStatus::no_code_cave,
                fmt::format("no executable segment of the target ends with {} unused bytes",
                            stub_blob().size()));
  t->cave = *cave;
  std::random_device rd;
  t->cookie = (std::uint64_t{rd()} << 32) ^ rd() ^ monotonic_ns();
  // The image holds absolute addresses into the region: size it once, then place it.
  const RegionStrings s{req.library, req.entry, req.arg};
  t->region_size = region_size(region_image(0, 0, t->addrs, 0, s).size());
  t->region = choose_region_hint(t->maps, t->region_size);
  if (t->region == 0)
    return fail(rep, AttachStatus::os_error, "no free address range for the region");
  t->image = region_image(t->region, t->cookie, t->addrs, req.dlopen_flags, s);
  // The frame's size depends on rsp only through 16-byte alignment.
  t->xsave = xsave_info();
  t->stack_needed =
      build_frame({1 << 20, {}, t->region, t->region_size, t->image, t->addrs, t->xsave})
          .stack_needed +
      16;
  rep->stub = t->cave.addr;
  rep->stub_object = t->cave.object;
  rep->region = t->region;
  return AttachStatus::ok;
}

// A failed system call on the target: target_exited if it is (about to be) gone.
AttachStatus failure(const Target& t, InjectReport* rep, std::string detail) {
  for (int i = 0; i < 100; ++i) {
    if (process_gone(t.pid)) return fail(rep, AttachStatus::target_exited, "the process exited");
    sleep_us(2000);
  }
  return fail(rep, AttachStatus::os_error, std::move(detail));
}

// The code cave, written once through the seized thread's mem file (see RemoteMem).
AttachStatus write_stub(const Target& t, const RemoteMem& wmem, InjectReport* rep) {
  if (t.cave.holds_blob) return AttachStatus::ok;
  const auto blob = stub_blob();
  std::vector<std::uint8_t> back(blob.size());
  if (!wmem.write(t.cave.addr, blob.data(), blob.size()) ||
      !t.mem.read(t.cave.addr, back.data(), back.size()) ||
      !std::equal(back.begin(), back.end(), blob.begin()))
    return failure(t, rep,
                   fmt::format("cannot write the stub into {} at {:#x}: {} (proc_mem.force_"
                               "override=never?)",
                               t.cave.object, t.cave.addr, std::strerror(errno)));
  return AttachStatus::ok;
}

AttachStatus seize_error(const Target& t, int err, InjectReport* rep) {
  if (err == EPERM) {
    const std::string p = permission_facts_problem(t);
    return fail(rep, AttachStatus::not_permitted,
                "PTRACE_SEIZE refused (EPERM): " +
                    (p.empty() ? std::string("an LSM (SELinux, AppArmor), a non-dumpable "
                                             "target or a user-namespace boundary")
                               : p));
  }
  return fail(rep, AttachStatus::os_error,
              fmt::format("PTRACE_SEIZE failed: {}", std::strerror(err)));
}

std::string list_comm(pid_t pid, pid_t tid) {
  auto c = read_small_file(fmt::format("/proc/{}/task/{}/comm", pid, tid));
  if (!c) return "?";
  while (!c->empty() && c->back() == '\n') c->pop_back();
  return *c;
}

// Whether the stub's frame, saves and calls fit in the stack the thread is on. A main
// thread's [stack] grows on demand; any other stack (a pthread's mapping above its guard
// page) must already hold it all.
bool stack_room(const std::vector<Mapping>& maps, std::uintptr_t sp, std::size_t need,
                std::string* why) {
  const Mapping* m = mapping_at(maps, sp - 1);
  if (m != nullptr && m->write && (m->path == "[stack]" || sp - m->start >= need)) return true;
  *why = fmt::format("its stack at {:#x} lacks {} free bytes", sp, need);
  return false;
}

// The thread being hijacked: its ptrace handle, its mem file (opened while it runs, so
// the stopped window holds no /proc lookups), its registers at the stop and the verdict.
struct Hold {
  StoppedThread th;
  RemoteMem wmem;
  std::vector<Mapping> maps;  // read while it runs: its stack's mapping, for stack_room
  user_regs_struct regs{};
  std::string why;
};

enum class Try { chosen, refused, fatal };

// One seize + interrupt of `tid` (the stub is copied on the first try). chosen: stopped
// at a safe point, in h; refused: released again, reason appended to *refused.
Try try_thread(const Target& t, const InjectRequest& req, pid_t tid, bool* stub_written, Hold* h,
               Timeline* tl, std::string* refused, AttachStatus* s, InjectReport* rep) {
  if (!h->th.seize(tid, tid == t.pid && t.caller_is_parent)) {
    if (h->th.error() == ESRCH && !process_gone(t.pid)) return Try::refused;  // it ended
    *s = h->th.error() == ESRCH ? fail(rep, AttachStatus::target_exited, "the process exited")
                                : seize_error(t, h->th.error(), rep);
    return Try::fatal;
  }
  phase(req, AttachPhase::seized);
  h->wmem = RemoteMem::open(fmt::format("/proc/{}/task/{}", t.pid, tid), true);
  h->maps = read_maps(t.pid);
  if (!*stub_written) {
    if ((*s = write_stub(t, h->wmem, rep)) != AttachStatus::ok) return Try::fatal;
    *stub_written = true;
    phase(req, AttachPhase::code_written);
  }
  tl->interrupt = monotonic_ns();
  const StopResult r = h->th.interrupt_and_wait(req.stop_timeout);
  tl->stop = monotonic_ns();
  ++rep->tries;
  switch (r) {
    case StopResult::stopped:
      break;
    case StopResult::exited:
      if (!process_gone(t.pid)) return Try::refused;
      *s = fail(rep, AttachStatus::target_exited, "the process exited");
      return Try::fatal;
    case StopResult::group_stopped:
      *s = fail(rep, AttachStatus::target_stopped, "the process was stopped by a signal");
      return Try::fatal;
    case StopResult::timed_out:
      *refused += fmt::format("; {}: no stop within {} ms", tid, req.stop_timeout.count());
      h->th.release();
      return Try::refused;
    case StopResult::failed:
      *s = failure(t, rep, fmt::format("waiting for {}: {}", tid, std::strerror(h->th.error())));
      return Try::fatal;
  }
  if (!h->th.get_regs(&h->regs)) {
    *s = failure(t, rep, "PTRACE_GETREGS failed");
    return Try::fatal;
  }
  StopVerdict v = judge_stop(h->regs, t.loader_text);
  if (v.suitable && !stack_room(h->maps, h->regs.rsp, t.stack_needed, &v.why)) v.suitable = false;
  h->why = v.why;
  if (v.suitable) return Try::chosen;
  h->th.release();
  *refused += fmt::format("; {} refused: {}", tid, v.why);
  return Try::refused;
}

// Seizes and stops threads in rank order until one stops at a safe point, max_tries
// stops at most; on ok it is stopped in *h.
AttachStatus stop_suitable_thread(const Target& t, const InjectRequest& req, Hold* h, Timeline* tl,
                                  InjectReport* rep) {
  const std::vector<pid_t> order =
      req.tid != 0 ? std::vector<pid_t>{req.tid} : order_candidates(list_threads(t.pid));
  if (order.empty())
    return fail(rep, AttachStatus::no_suitable_thread, "no thread that could be stopped");
  std::string refused;
  bool stub_written = false;
  for (int attempt = 0; attempt < req.max_tries; ++attempt) {
    const std::size_t i = static_cast<std::size_t>(attempt) % order.size();
    if (attempt > 0 && i == 0) sleep_us(1000);  // let running threads move on
    AttachStatus s = AttachStatus::ok;
    switch (try_thread(t, req, order[i], &stub_written, h, tl, &refused, &s, rep)) {
      case Try::chosen: {
        const pid_t tid = order[i];
        rep->thread_choice = fmt::format("thread {} ({}) {}; {} stop(s){}", tid,
                                         list_comm(t.pid, tid), h->why, rep->tries, refused);
        return AttachStatus::ok;
      }
      case Try::fatal:
        return s;
      case Try::refused:
        break;
    }
  }
  return fail(rep, AttachStatus::no_suitable_thread,
              fmt::format("{} stop(s), none at a safe point{}", rep->tries, refused));
}

// Writes the frame and points the stopped thread at the stub, then releases it.
AttachStatus hijack(const Target& t, const InjectRequest& req, Hold* h, Timeline* tl,
                    InjectReport* rep) {
  const ResumePoint resume = resume_point(h->regs);
  const Frame f =
      build_frame({h->regs.rsp, resume, t.region, t.region_size, t.image, t.addrs, t.xsave});
  if (!h->wmem.write(f.rsp, f.bytes.data(), f.bytes.size()))
    return failure(t, rep,
                   fmt::format("cannot write the frame at {:#x}: {}", f.rsp, std::strerror(errno)));
  phase(req, AttachPhase::frame_written);
  user_regs_struct r = h->regs;
  r.rip = t.cave.addr;
  r.rsp = f.rsp;
  r.orig_rax = static_cast<unsigned long long>(-1);
  if (!h->th.set_regs(r)) return failure(t, rep, "PTRACE_SETREGS failed");
  phase(req, AttachPhase::hijacked);
  tl->release = monotonic_ns();  // before PTRACE_DETACH: the thread cannot run until that call
  const bool released = h->th.release();
  if (!released) return fail(rep, AttachStatus::target_exited, "the thread ended");
  rep->tid = h->th.tid();
  rep->syscall = resume.syscall;
  rep->restarted = resume.restarts;
  phase(req, AttachPhase::released);
  return AttachStatus::ok;
}

template <typename T>
T field(const std::vector<std::uint8_t>& r, std::size_t off) {
  T v;
  std::memcpy(&v, r.data() + off, sizeof v);
  return v;
}

std::uint64_t span_ns(std::uint64_t from, std::uint64_t to) { return to > from ? to - from : 0; }

// Fills the report from the region once the loader thread has finished.
AttachStatus finish(const Target& t, const Timeline& tl, InjectReport* rep) {
  std::vector<std::uint8_t> r(ATTACH_R_STRINGS);
  if (!t.mem.read(t.region, r.data(), r.size()))
    return fail(rep, AttachStatus::target_exited, "the process exited");
  const auto stub_entry = field<std::uint64_t>(r, ATTACH_R_T_STUB_ENTRY);
  const auto stub_exit = field<std::uint64_t>(r, ATTACH_R_T_STUB_EXIT);
  const auto loader = field<std::uint64_t>(r, ATTACH_R_T_LOADER);
  const auto loaded = field<std::uint64_t>(r, ATTACH_R_T_LOADED);
  rep->ns.release_to_stub = span_ns(tl.release, stub_entry);
  rep->ns.stub = span_ns(stub_entry, stub_exit);
  rep->ns.load = span_ns(loader, loaded);
  rep->kept_from_running_ns = span_ns(tl.interrupt, stub_exit);
  rep->handle = field<std::uint64_t>(r, ATTACH_R_HANDLE);
  const char* text = reinterpret_cast<const char*>(r.data() + ATTACH_R_ERROR);
  const std::string error(text, strnlen(text, ATTACH_R_ERROR_CAP));
  switch (field<std::uint32_t>(r, ATTACH_R_LOADER_STATE)) {
    case ATTACH_LOADER_LOAD_FAILED:
      return fail(rep, AttachStatus::loader_failed, "dlopen failed: " + error);
    case ATTACH_LOADER_NO_ENTRY:
      return fail(rep, AttachStatus::entry_missing, "dlsym failed: " + error);
    default:
      break;
  }
  rep->entry_called = true;
  rep->entry_result = field<std::int32_t>(r, ATTACH_R_ENTRY_RC);
  rep->ns.entry = span_ns(loaded, field<std::uint64_t>(r, ATTACH_R_T_ENTRY_DONE));
  return AttachStatus::ok;
}

// Why the stub ended without a region, from the state word it left in the frame.
std::string stub_failure(std::uint64_t word) {
  if ((word & 0xff) == ATTACH_STUB_NO_REGION)
    return fmt::format("the stub could not map its region: {}",
                       std::strerror(static_cast<int>(word >> 8)));
  return "the stub ended without mapping its region";
}

// Polls the region (and, until it exists, the frame's state word) for the outcome.
AttachStatus await_outcome(const Target& t, const InjectRequest& req, std::uintptr_t sp,
                           const Timeline& tl, InjectReport* rep) {
  const std::uint64_t deadline = tl.release + std::uint64_t(req.timeout.count()) * 1000000;
  bool stub_seen = false, loaded_seen = false;
  for (int poll = 0;; ++poll) {
    std::uint64_t head[2] = {0, 0};  // magic; stub state | loader state << 32
    const bool region = t.mem.read(t.region, head, sizeof head) && head[0] == t.cookie;
    const auto stub = static_cast<std::uint32_t>(head[1]);
    const auto loader = static_cast<std::uint32_t>(head[1] >> 32);
    if (region && stub != 0 && !stub_seen) {
      stub_seen = true;
      phase(req, AttachPhase::stub_done);
      if ((stub & 0xff) == ATTACH_STUB_CREATE_FAILED)
        return fail(rep, AttachStatus::stub_failed,
                    "pthread_create failed in the target: " +
                        std::string(std::strerror(static_cast<int>(stub >> 8))));
    }
    if (region && loader == ATTACH_LOADER_IN_ENTRY && !loaded_seen) {
      loaded_seen = true;
      phase(req, AttachPhase::loaded);
    }
    // Both must be done: the stub's last stamp can come after the loader's.
    if (stub_seen && (loader == ATTACH_LOADER_LOAD_FAILED || loader == ATTACH_LOADER_NO_ENTRY ||
                      loader == ATTACH_LOADER_DONE)) {
      if (loader == ATTACH_LOADER_DONE && !loaded_seen) phase(req, AttachPhase::loaded);
      const AttachStatus s = finish(t, tl, rep);
      if (s == AttachStatus::ok) phase(req, AttachPhase::entry_returned);
      return s;
    }
    std::uint64_t word = ATTACH_STACK_PENDING;
    if (!region && t.mem.read_value(sp - ATTACH_STATE_BELOW, &word) &&
        word != ATTACH_STACK_PENDING &&
        !(t.mem.read(t.region, head, sizeof head) && head[0] == t.cookie))
      return fail(rep, AttachStatus::stub_failed, stub_failure(word));
    if (process_gone(t.pid))
      return fail(rep, AttachStatus::target_exited,
                  stub_seen ? "the process exited while the library loaded or ENTRY ran"
                            : "the process exited before the stub finished");
    if (monotonic_ns() > deadline)
      return fail(rep, AttachStatus::timed_out,
                  !stub_seen ? "the stub has not finished (is the thread blocked in it?)"
                  : !region || loader < ATTACH_LOADER_IN_ENTRY ? "dlopen has not returned"
                                                               : "ENTRY has not returned");
    sleep_us(poll < 100 ? 20 : 200);
  }
}

}  // namespace

const char* to_string(AttachStatus s) noexcept {
  switch (s) {
    case AttachStatus::ok:
      return "ok";
    case AttachStatus::bad_request:
      return "bad_request";
    case AttachStatus::no_such_process:
      return "no_such_process";
    case AttachStatus::not_permitted:
      return "not_permitted";
    case AttachStatus::already_traced:
      return "already_traced";
    case AttachStatus::not_x86_64:
      return "not_x86_64";
    case AttachStatus::static_target:
      return "static_target";
    case AttachStatus::no_loader:
      return "no_loader";
    case AttachStatus::library_missing:
      return "library_missing";
    case AttachStatus::target_stopped:
      return "target_stopped";
    case AttachStatus::no_code_cave:
      return "no_code_cave";
    case AttachStatus::no_suitable_thread:
      return "no_suitable_thread";
    case AttachStatus::target_exited:
      return "target_exited";
    case AttachStatus::stub_failed:
      return "stub_failed";
    case AttachStatus::loader_failed:
      return "loader_failed";
    case AttachStatus::entry_missing:
      return "entry_missing";
    case AttachStatus::timed_out:
      return "timed_out";
    case AttachStatus::os_error:
      return "os_error";
  }
  return "unknown";
}

const char* to_string(AttachPhase p) noexcept {
  switch (p) {
    case AttachPhase::checked:
      return "checked";
    case AttachPhase::seized:
      return "seized";
    case AttachPhase::code_written:
      return "code_written";
    case AttachPhase::stopped:
      return "stopped";
    case AttachPhase::frame_written:
      return "frame_written";
    case AttachPhase::hijacked:
      return "hijacked";
    case AttachPhase::released:
      return "released";
    case AttachPhase::stub_done:
      return "stub_done";
    case AttachPhase::loaded:
      return "loaded";
    case AttachPhase::entry_returned:
      return "entry_returned";
  }
  return "unknown";
}

AttachStatus inject_library(pid_t pid, const InjectRequest& req, InjectReport* report) {
  InjectReport scratch;
  InjectReport* rep = report != nullptr ? report : &scratch;
  *rep = InjectReport{};
  Timeline tl;
  tl.start = monotonic_ns();
  Target t;
  AttachStatus s = validate(req, rep);
  if (s == AttachStatus::ok) s = check_process(pid, req, &t, rep);
  if (s == AttachStatus::ok) s = find_loader(&t, rep);
  if (s == AttachStatus::ok) s = find_places(&t, req, rep);
  rep->ns.checks = span_ns(tl.start, monotonic_ns());
  if (s != AttachStatus::ok) return s;
  phase(req, AttachPhase::checked);
  {
    Hold h;  // its destructor releases the thread on every early return
    s = stop_suitable_thread(t, req, &h, &tl, rep);
    if (s != AttachStatus::ok) return s;
    phase(req, AttachPhase::stopped);
    rep->ns.interrupt_to_stop = span_ns(tl.interrupt, tl.stop);
    s = hijack(t, req, &h, &tl, rep);
    rep->ns.stop_to_release = span_ns(tl.stop, tl.release);
    if (s != AttachStatus::ok) return s;
    s = await_outcome(t, req, h.regs.rsp, tl, rep);
  }
  rep->ns.total = span_ns(tl.start, monotonic_ns());
  return s;
}

}  // namespace crossmod::harness::attach
