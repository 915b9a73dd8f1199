// An alternate signal stack for the calling thread, for as long as the object lives: the
// fault handlers of the harness's and the bench's executor threads run on it, because a
// torn call may have just pushed onto the thread's own stack.
// Thread safety: construct and destroy on the thread it serves. If mmap fails the thread
// keeps running without one (a fault then runs its handler on the thread's stack).
#pragma once
#include <signal.h>
#include <sys/mman.h>

#include <cstddef>

namespace crossmod::testsupport {

class AltStack {
 public:
  AltStack() {
    p_ = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) return;
    stack_t ss{};
    ss.ss_sp = p_;
    ss.ss_size = kSize;
    sigaltstack(&ss, nullptr);
  }
  ~AltStack() {
    if (p_ == MAP_FAILED) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
    munmap(p_, kSize);
  }
  AltStack(const AltStack&) = delete;
  AltStack& operator=(const AltStack&) = delete;

 private:
  static constexpr std::size_t kSize = 64 * 1024;
  void* p_ = MAP_FAILED;
};

}  // namespace crossmod::testsupport
