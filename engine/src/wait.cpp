// The waits of the straddling protocol: TSC spin, membarrier SYNC_CORE, or none.
// Thread safety: thread-safe. wait_from is async-signal-safe (a spin or one syscall);
// sync_core_register makes syscalls once, guarded by a function-local static.
#include "crossmod/wait.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "crossmod/x86.hpp"

namespace crossmod {

namespace {

long membarrier(int cmd, unsigned flags) noexcept {
  return syscall(__NR_membarrier, cmd, flags, 0);
}

struct Registration {
  Status status = Status::ok;
  int err = 0;
};

Registration do_register() noexcept {
  // membarrier(2): QUERY returns the supported commands as a bit mask; a process must
  // REGISTER the SYNC_CORE command before issuing it (Linux >= 4.16).
  const long mask = membarrier(MEMBARRIER_CMD_QUERY, 0);
  if (mask < 0) return {errno == ENOSYS ? Status::unsupported : Status::os_error, errno};
  if ((mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0 ||
      (mask & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE) == 0)
    return {Status::unsupported, 0};
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0) != 0)
    return {Status::os_error, errno};
  return {Status::ok, 0};
}

std::atomic<bool> g_sync_core_ready{false};

}  // namespace

Status sync_core_register(std::error_code* ec) noexcept {
  // Magic static: initialised exactly once even under concurrent first calls.
  static const Registration reg = [] {
    Registration r = do_register();
    if (r.status == Status::ok) g_sync_core_ready.store(true, std::memory_order_release);
    return r;
  }();
  if (ec != nullptr)
    *ec = reg.err != 0 ? std::error_code(reg.err, std::generic_category()) : std::error_code();
  return reg.status;
}

Status wait_from(const WaitPolicy& policy, std::uint64_t start) noexcept {
  switch (policy.kind) {
    case WaitPolicy::Kind::none:
      return Status::ok;
    case WaitPolicy::Kind::ticks:
      x86::spin_ticks_from(start, policy.ticks);
      return Status::ok;
    case WaitPolicy::Kind::sync_core: {
      if (!g_sync_core_ready.load(std::memory_order_acquire)) return Status::unsupported;
      // Every thread of this process that runs on some CPU executes a core-serializing
      // instruction before this returns (membarrier(2)), so no core keeps a stale fetch.
      const int saved = errno;
      const long rc = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0);
      const bool ok = rc == 0;
      errno = saved;
      return ok ? Status::ok : Status::os_error;
    }
  }
  return Status::unsupported;
}

}  // namespace crossmod
