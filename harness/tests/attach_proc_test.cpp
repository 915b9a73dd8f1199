// Live attach's building blocks: /proc parsing, ptrace permission prediction, the syscall
// resume point, stop judgement and thread ranking, and the remote ELF lookups run against
// this test process itself (no ptrace needed).
// Threads: single-threaded.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "attach/proc.hpp"
#include "attach/remote_elf.hpp"
#include "attach/thread_stop.hpp"

namespace crossmod::harness::attach {
namespace {

TEST(AttachProc, ParsesStatus) {
  const auto s = parse_status(
      "Name:\tmy prog\nState:\tS (sleeping)\nTgid:\t42\nPid:\t43\nPPid:\t7\nTracerPid:\t0\n"
      "Uid:\t1000\t1001\t1002\t1003\nGid:\t100\t101\t102\t103\nCapEff:\t0000000000080000\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name, "my prog");
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->tgid, 42);
  EXPECT_EQ(s->ppid, 7);
  EXPECT_EQ(s->uid[0], 1000);
  EXPECT_EQ(s->uid[2], 1002);
  EXPECT_EQ(s->gid[1], 101);
  EXPECT_TRUE(has_cap_sys_ptrace(*s));
  EXPECT_FALSE(parse_status("Name:\tx\n"));
}

TEST(AttachProc, ParsesSyscallLines) {
  ThreadInfo t;
  parse_syscall_line("running\n", &t);
  EXPECT_EQ(t.syscall, ThreadInfo::kRunning);
  parse_syscall_line("-1 0x7ffd0000 0x401000\n", &t);
  EXPECT_EQ(t.syscall, -1);
  EXPECT_EQ(t.pc, 0x401000U);
  parse_syscall_line("0 0x0 0x7f00 0x100 0x0 0x0 0x0 0x7ffe1234 0x7f1234567890\n", &t);
  EXPECT_EQ(t.syscall, 0);
  EXPECT_EQ(t.pc, 0x7f1234567890U);
  parse_syscall_line("garbage", &t);
  EXPECT_EQ(t.syscall, ThreadInfo::kUnknown);
}

TEST(AttachProc, ParsesMapsWithSpacesAndDeletedFiles) {
  const auto m = parse_maps(
      "55d0-55e0 r-xp 00001000 fd:01 1234    /opt/my dir/prog\n"
      "7f00-7f10 rw-p 00000000 00:00 0 \n"
      "7f10-7f20 r-xp 00002000 fd:01 99   /usr/lib/libc.so.6 (deleted)\n"
      "7ffd-7ffe rw-p 00000000 00:00 0                          [stack]\n");
  ASSERT_EQ(m.size(), 4U);
  EXPECT_EQ(m[0].path, "/opt/my dir/prog");
  EXPECT_TRUE(m[0].exec && m[0].read && !m[0].write);
  EXPECT_EQ(m[0].offset, 0x1000U);
  EXPECT_EQ(m[0].inode, 1234U);
  EXPECT_EQ(m[1].path, "");
  EXPECT_EQ(object_basename(m[2].path), "libc.so.6");
  EXPECT_EQ(m[3].path, "[stack]");
  EXPECT_EQ(mapping_at(m, 0x7ffd), &m[3]);
  EXPECT_EQ(mapping_at(m, 0x1), nullptr);
}

TEST(AttachProc, RegionHintLiesInTheLargestGap) {
  auto span = [](std::uintptr_t a, std::uintptr_t b) {
    Mapping m;
    m.start = a;
    m.end = b;
    return m;
  };
  const std::vector<Mapping> maps = {span(0x400000, 0x500000), span(0x7f0000000000, 0x7f0000100000),
                                     span(0x7ffff0000000, 0x7ffff0021000)};
  const std::uintptr_t h = choose_region_hint(maps, 8192);
  EXPECT_GT(h, 0x500000U);
  EXPECT_LT(h + 8192, 0x7f0000000000U);
  EXPECT_EQ(h % 4096, 0U);
  EXPECT_EQ(choose_region_hint({span(0x10000, 0x7ffffffff000)}, 4096), 0U);
}

PermissionFacts facts(long self_uid, bool cap, long target_uid, int yama, bool descendant) {
  PermissionFacts f;
  for (int i = 0; i < 4; ++i) {
    f.self.uid[i] = f.self.gid[i] = self_uid;
    f.target.uid[i] = f.target.gid[i] = target_uid;
  }
  f.self.cap_eff = cap ? (1ULL << 19) : 0;
  f.yama = yama;
  f.target_is_descendant = descendant;
  return f;
}

TEST(AttachProc, PredictsPtraceRefusals) {
  bool certain = false;
  EXPECT_EQ(permission_problem(facts(1000, false, 1000, -1, false), &certain), "");
  EXPECT_EQ(permission_problem(facts(1000, false, 1000, 0, false), &certain), "");
  EXPECT_NE(permission_problem(facts(1000, false, 1001, 0, false), &certain).find("another user"),
            std::string::npos);
  EXPECT_TRUE(certain);
  EXPECT_EQ(permission_problem(facts(0, true, 1001, 0, false), &certain), "");
  EXPECT_NE(permission_problem(facts(0, true, 0, 3, true), &certain).find("ptrace_scope is 3"),
            std::string::npos);
  EXPECT_NE(permission_problem(facts(1000, false, 1000, 2, true), &certain).find("scope is 2"),
            std::string::npos);
  EXPECT_EQ(permission_problem(facts(0, true, 0, 2, false), &certain), "");
  EXPECT_NE(permission_problem(facts(1000, false, 1000, 1, false), &certain).find("scope is 1"),
            std::string::npos);
  EXPECT_FALSE(certain);  // PR_SET_PTRACER may still allow it
  EXPECT_EQ(permission_problem(facts(1000, false, 1000, 1, true), &certain), "");
}

user_regs_struct regs(std::uint64_t rip, std::int64_t rax, std::int64_t orig_rax) {
  user_regs_struct r{};
  r.rip = rip;
  r.rax = static_cast<unsigned long long>(rax);
  r.orig_rax = static_cast<unsigned long long>(orig_rax);
  return r;
}

TEST(AttachThread, ResumePointRestartsInterruptedSyscallsAsTheKernelWould) {
  for (const long code : {512L, 513L, 514L}) {  // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND
    const ResumePoint p = resume_point(regs(0x1002, -code, SYS_read));
    EXPECT_EQ(p.rip, 0x1000U) << code;
    EXPECT_EQ(p.rax, static_cast<std::uint64_t>(SYS_read)) << code;
    EXPECT_TRUE(p.restarts);
    EXPECT_EQ(p.syscall, SYS_read);
  }
  const ResumePoint rb = resume_point(regs(0x2002, -516, SYS_clock_nanosleep));
  EXPECT_EQ(rb.rip, 0x2000U);
  EXPECT_EQ(rb.rax, static_cast<std::uint64_t>(SYS_restart_syscall));
  for (const auto& r :
       {regs(0x3000, 5, SYS_read), regs(0x3000, -EINTR, SYS_read), regs(0x3000, -512, -1)}) {
    const ResumePoint p = resume_point(r);
    EXPECT_EQ(p.rip, 0x3000U);
    EXPECT_EQ(p.rax, r.rax);
    EXPECT_FALSE(p.restarts);
  }
}

TEST(AttachThread, JudgesStopPoints) {
  const TextRange libc[] = {{0x7000, 0x8000}};
  EXPECT_TRUE(judge_stop(regs(0x1000, 0, -1), libc).suitable);   // own code
  EXPECT_FALSE(judge_stop(regs(0x7100, 0, -1), libc).suitable);  // inside libc
  const StopVerdict read = judge_stop(regs(0x7102, -512, SYS_read), libc);
  EXPECT_TRUE(read.suitable);
  EXPECT_NE(read.why.find("blocked in read"), std::string::npos) << read.why;
  EXPECT_TRUE(judge_stop(regs(0x7102, -EINTR, SYS_futex), libc).suitable);
  EXPECT_FALSE(judge_stop(regs(0x7102, 0, SYS_futex), libc).suitable);      // lock just taken?
  EXPECT_FALSE(judge_stop(regs(0x7102, 0x1000, SYS_mmap), libc).suitable);  // malloc?
  EXPECT_TRUE(judge_stop(regs(0x7102, 6, SYS_read), libc).suitable);
}

ThreadInfo thread(pid_t tid, char state, long syscall) {
  ThreadInfo t;
  t.tid = tid;
  t.state = state;
  t.syscall = syscall;
  return t;
}

TEST(AttachThread, OrdersCandidatesRestartableWaitsFirst) {
  const std::vector<pid_t> order = order_candidates({
      thread(10, 'S', SYS_futex),
      thread(11, 'R', ThreadInfo::kRunning),
      thread(12, 'S', SYS_epoll_wait),
      thread(13, 'S', SYS_read),
      thread(14, 'Z', -1),
      thread(15, 'S', SYS_clock_nanosleep),
      thread(16, 't', SYS_read),
  });
  EXPECT_EQ(order, (std::vector<pid_t>{13, 15, 11, 10, 12}));
}

TEST(AttachElf, FindsLibcFunctionsFromMappedTables) {
  const RemoteMem mem = RemoteMem::open("/proc/self", false);
  ASSERT_TRUE(mem.valid());
  const auto objects = loaded_objects(mem, read_maps(::getpid()));
  const LoadedObject* libc = nullptr;
  for (const LoadedObject& o : objects)
    if (object_basename(o.path).starts_with("libc.so")) libc = &o;
  ASSERT_NE(libc, nullptr);
  for (const char* name : {"dlopen", "dlsym", "dlerror", "pthread_create", "pthread_detach"}) {
    const auto a = find_dynamic_symbol(mem, *libc, name);
    ASSERT_TRUE(a) << name;
    EXPECT_EQ(*a, reinterpret_cast<std::uintptr_t>(::dlsym(RTLD_DEFAULT, name))) << name;
  }
  EXPECT_FALSE(find_dynamic_symbol(mem, *libc, "crossmod_no_such_function"));
  std::string why;
  EXPECT_EQ(classify_exe(::getpid(), &why), ExeKind::dynamic_program) << why;
}

TEST(AttachElf, FindsAZeroCaveAfterAnExecutableSegment) {
  const RemoteMem mem = RemoteMem::open("/proc/self", false);
  const auto maps = read_maps(::getpid());
  const std::vector<std::uint8_t> blob(600, 0xcc);
  const auto cave = find_code_cave(mem, loaded_objects(mem, maps), blob);
  ASSERT_TRUE(cave) << "no object of this process has an executable segment padded to a page";
  EXPECT_GE(cave->size, blob.size());
  EXPECT_EQ(cave->addr % 16, 0U);
  const Mapping* m = mapping_at(maps, cave->addr);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->exec);
  EXPECT_FALSE(cave->holds_blob);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(cave->addr);
  for (std::size_t i = 0; i < blob.size(); ++i) ASSERT_EQ(bytes[i], 0) << i;
}

}  // namespace
}  // namespace crossmod::harness::attach
