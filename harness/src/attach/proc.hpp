// /proc readers for live attach: a process's status and threads, its memory map, and the
// checks ptrace(2) would make (Yama, uids, CAP_SYS_PTRACE), all without changing it.
// Thread safety: reentrant, no shared state; allocates and reads files (not for signal
// handlers).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crossmod::harness::attach {

// The fields of /proc/PID/status this module uses.
struct ProcStatus {
  std::string name;
  char state = '?';  // R S D T t Z X ...
  pid_t tgid = 0, ppid = 0, tracer = 0;
  long uid[4] = {-1, -1, -1, -1};  // real, effective, saved, filesystem
  long gid[4] = {-1, -1, -1, -1};
  std::uint64_t cap_eff = 0;
};
std::optional<ProcStatus> parse_status(std::string_view text);
std::optional<ProcStatus> read_status(const std::string& path);  // e.g. "/proc/1/status"

// One thread as /proc/PID/task/TID/{stat,syscall} show it, read without stopping it.
// syscall: the number it is blocked in, -1 when blocked outside a syscall, kRunning when
// it runs (the kernel does not sample a running thread), kUnknown when unreadable.
struct ThreadInfo {
  pid_t tid = 0;
  char state = '?';
  long syscall = -3;
  std::uintptr_t pc = 0;  // user pc while blocked (0 when running or unknown)
  pid_t tracer = 0;
  std::string comm;
  static constexpr long kRunning = -2;
  static constexpr long kUnknown = -3;
};
std::vector<ThreadInfo> list_threads(pid_t pid);
// Parses /proc/TID/syscall ("running", "-1 sp pc", "nr a1..a6 sp pc") into `t`.
void parse_syscall_line(std::string_view text, ThreadInfo* t);

// One line of /proc/PID/maps.
struct Mapping {
  std::uintptr_t start = 0, end = 0;
  bool read = false, write = false, exec = false;
  std::uint64_t offset = 0, inode = 0;
  std::string path;  // "" for anonymous; "[stack]", "[vdso]", "/usr/lib/... (deleted)"
};
std::vector<Mapping> parse_maps(std::string_view text);
std::vector<Mapping> read_maps(pid_t pid);
const Mapping* mapping_at(const std::vector<Mapping>& maps, std::uintptr_t addr);
// A page-aligned address for `size` bytes in the middle of the largest unmapped gap below
// the 47-bit user limit: far from the heap's growth and from the kernel's top-down mmap
// placement, so nothing else maps there between now and the stub's mmap. 0 if none fits.
std::uintptr_t choose_region_hint(const std::vector<Mapping>& maps, std::size_t size);

// /proc/sys/kernel/yama/ptrace_scope: 0..3, or -1 when Yama is not built in.
int yama_scope();

// Everything ptrace's permission check (kernel/ptrace.c __ptrace_may_access, mode
// ATTACH_REALCREDS, then the Yama LSM) decides from what /proc shows.
struct PermissionFacts {
  ProcStatus self, target;
  int yama = -1;
  bool target_is_descendant = false;  // Yama scope 1 lets an ancestor attach
};
// Empty when nothing predicts a refusal; else one line saying why ptrace will refuse.
// *certain is false for the one prediction the kernel may overrule: under Yama scope 1 a
// process may have named its tracer with prctl(PR_SET_PTRACER), which /proc does not
// show; callers then try the attach and use the line only to explain an EPERM.
std::string permission_problem(const PermissionFacts& f, bool* certain);
bool has_cap_sys_ptrace(const ProcStatus& s);
// True when `pid` has `ancestor` on its parent chain (Yama's "descendant").
bool is_descendant(pid_t pid, pid_t ancestor);

// Reads a whole small file (a /proc entry); nullopt with errno set when it cannot.
std::optional<std::string> read_small_file(const std::string& path);

}  // namespace crossmod::harness::attach
