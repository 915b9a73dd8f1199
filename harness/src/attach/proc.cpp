// /proc readers for live attach (see proc.hpp): status, threads, maps, Yama and the
// permission rules of ptrace(2) ("Ptrace access mode checking").
// Thread safety: reentrant; allocates; blocking reads of /proc files.
#include "attach/proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace crossmod::harness::attach {

namespace {

constexpr int kCapSysPtrace = 19;  // linux/capability.h

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// Splits s at whitespace into at most n fields; returns how many it found.
int split_fields(std::string_view s, std::string_view* out, int n) {
  int k = 0;
  std::size_t i = 0;
  while (k < n) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    if (i >= s.size()) break;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    out[k++] = s.substr(i, j - i);
    i = j;
  }
  return k;
}

template <typename T>
bool parse_num(std::string_view s, T* v, int base = 10) {
  if (base == 16 && s.starts_with("0x")) s.remove_prefix(2);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

void parse_ids(std::string_view v, long* ids) {
  std::string_view f[4];
  const int n = split_fields(v, f, 4);
  for (int i = 0; i < n; ++i) parse_num(f[i], &ids[i]);
}

}  // namespace

std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      errno = e;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

std::optional<ProcStatus> parse_status(std::string_view text) {
  ProcStatus s;
  bool have_tgid = false;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    const std::string_view v = trim(line.substr(colon + 1));
    if (key == "Name")
      s.name = std::string(v);
    else if (key == "State" && !v.empty())
      s.state = v[0];
    else if (key == "Tgid")
      have_tgid = parse_num(v, &s.tgid);
    else if (key == "PPid")
      parse_num(v, &s.ppid);
    else if (key == "TracerPid")
      parse_num(v, &s.tracer);
    else if (key == "Uid")
      parse_ids(v, s.uid);
    else if (key == "Gid")
      parse_ids(v, s.gid);
    else if (key == "CapEff")
      parse_num(v, &s.cap_eff, 16);
  }
  if (!have_tgid) return std::nullopt;
  return s;
}

std::optional<ProcStatus> read_status(const std::string& path) {
  const auto text = read_small_file(path);
  if (!text) return std::nullopt;
  return parse_status(*text);
}

void parse_syscall_line(std::string_view text, ThreadInfo* t) {
  text = trim(text);
  if (text == "running") {
    t->syscall = ThreadInfo::kRunning;
    return;
  }
  std::string_view f[9];
  const int n = split_fields(text, f, 9);
  long nr = 0;
  if (n < 1 || !parse_num(f[0], &nr)) {
    t->syscall = ThreadInfo::kUnknown;
    return;
  }
  t->syscall = nr;
  // "-1 sp pc" outside a syscall, "nr a1 .. a6 sp pc" inside one.
  const int pc_field = nr == -1 ? 2 : 8;
  if (n > pc_field) parse_num(f[pc_field], &t->pc, 16);
}

std::vector<ThreadInfo> list_threads(pid_t pid) {
  std::vector<ThreadInfo> out;
  const std::string dir = fmt::format("/proc/{}/task", pid);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    pid_t tid = 0;
    if (!parse_num(std::string_view(e->d_name), &tid) || tid <= 0) continue;
    ThreadInfo t;
    t.tid = tid;
    const std::string base = fmt::format("{}/{}/", dir, tid);
    if (const auto st = read_status(base + "status")) {
      t.state = st->state;
      t.tracer = st->tracer;
      t.comm = st->name;
    }
    if (const auto sc = read_small_file(base + "syscall")) parse_syscall_line(*sc, &t);
    out.push_back(std::move(t));
  }
  ::closedir(d);
  return out;
}

std::vector<Mapping> parse_maps(std::string_view text) {
  std::vector<Mapping> out;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    std::string_view f[5];
    if (split_fields(line, f, 5) < 5) continue;
    Mapping m;
    const std::size_t dash = f[0].find('-');
    if (dash == std::string_view::npos || !parse_num(f[0].substr(0, dash), &m.start, 16) ||
        !parse_num(f[0].substr(dash + 1), &m.end, 16) || f[1].size() < 4)
      continue;
    m.read = f[1][0] == 'r';
    m.write = f[1][1] == 'w';
    m.exec = f[1][2] == 'x';
    parse_num(f[2], &m.offset, 16);
    parse_num(f[4], &m.inode);
    // The path is the rest of the line after the inode (it may contain spaces).
    const std::size_t at = static_cast<std::size_t>(f[4].data() + f[4].size() - line.data());
    m.path = std::string(trim(line.substr(at)));
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<Mapping> read_maps(pid_t pid) {
  const auto text = read_small_file(fmt::format("/proc/{}/maps", pid));
  return text ? parse_maps(*text) : std::vector<Mapping>{};
}

const Mapping* mapping_at(const std::vector<Mapping>& maps, std::uintptr_t addr) {
  for (const Mapping& m : maps)
    if (addr >= m.start && addr < m.end) return &m;
  return nullptr;
}

std::uintptr_t choose_region_hint(const std::vector<Mapping>& maps, std::size_t size) {
  constexpr std::uintptr_t kLow = 0x10000;          // vm.mmap_min_addr's default
  constexpr std::uintptr_t kHigh = 0x7ffffffff000;  // TASK_SIZE with 4-level paging
  constexpr std::uintptr_t kPage = 4096;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> used;
  for (const Mapping& m : maps)
    if (m.start < kHigh) used.emplace_back(m.start, std::min(m.end, kHigh));
  std::sort(used.begin(), used.end());
  std::uintptr_t best_lo = 0, best_len = 0, cursor = kLow;
  const auto consider = [&](std::uintptr_t lo, std::uintptr_t hi) {
    if (hi > lo && hi - lo > best_len) best_lo = lo, best_len = hi - lo;
  };
  for (const auto& [a, b] : used) {
    consider(cursor, a);
    cursor = std::max(cursor, b);
  }
  consider(cursor, kHigh);
  // Leave a page of margin on each side of the region.
  if (best_len < size + 4 * kPage) return 0;
  return (best_lo + best_len / 2 - size / 2) & ~(kPage - 1);
}

int yama_scope() {
  const auto text = read_small_file("/proc/sys/kernel/yama/ptrace_scope");
  int v = -1;
  if (!text || !parse_num(trim(*text), &v)) return -1;
  return v;
}

bool has_cap_sys_ptrace(const ProcStatus& s) { return (s.cap_eff >> kCapSysPtrace) & 1U; }

bool is_descendant(pid_t pid, pid_t ancestor) {
  for (int depth = 0; depth < 4096 && pid > 1; ++depth) {
    const auto st = read_status(fmt::format("/proc/{}/status", pid));
    if (!st) return false;
    if (st->ppid == ancestor) return true;
    pid = st->ppid;
  }
  return false;
}

std::string permission_problem(const PermissionFacts& f, bool* certain) {
  *certain = true;
  const bool cap = has_cap_sys_ptrace(f.self);
  if (f.yama == 3)
    return "Yama ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): no process may "
           "attach until reboot";
  if (f.yama == 2 && !cap)
    return "Yama ptrace_scope is 2: only a process with CAP_SYS_PTRACE may attach "
           "(run as root, or setcap cap_sys_ptrace+ep)";
  // The kernel compares the caller's real ids with the target's real, effective and saved
  // ids (PTRACE_MODE_REALCREDS).
  const long uid = f.self.uid[0], gid = f.self.gid[0];
  bool same = true;
  for (int i = 0; i < 3; ++i) same = same && f.target.uid[i] == uid && f.target.gid[i] == gid;
  if (!same && !cap)
    return fmt::format(
        "the target runs as another user (uid {}/{}/{}, gid {}) than this "
        "process (uid {}, gid {}) and this process lacks CAP_SYS_PTRACE",
        f.target.uid[0], f.target.uid[1], f.target.uid[2], f.target.gid[0], uid, gid);
  if (f.yama == 1 && !cap && !f.target_is_descendant) {
    *certain = false;
    return "Yama ptrace_scope is 1: only an ancestor of the target (or a tracer it named "
           "with prctl(PR_SET_PTRACER)) may attach without CAP_SYS_PTRACE";
  }
  return {};
}

}  // namespace crossmod::harness::attach
