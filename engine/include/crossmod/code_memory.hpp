// Code memory: make ranges of code writable (and restore them), and allocate executable
// memory within rel32 reach of a target. Patch functions accept only addresses inside a
// range registered here, so an unwritable address is a Status, never a SIGSEGV.
// Thread safety: all functions thread-safe. is_writable() is lock-free and
// async-signal-safe; the others make system calls and may allocate.
#pragma once
#include <cstddef>
#include <cstdint>
#include <system_error>

#include "crossmod/status.hpp"

namespace crossmod {

// RAII: on make(), mprotect()s the pages covering [addr, addr+len) to
// PROT_READ|PROT_WRITE|PROT_EXEC and registers the range; the destructor restores the
// protection the pages had before (read from /proc/self/maps) and unregisters it.
// Movable, not copyable.
class WritableRange {
 public:
  WritableRange() noexcept = default;
  ~WritableRange();
  WritableRange(WritableRange&& other) noexcept;
  WritableRange& operator=(WritableRange&& other) noexcept;
  WritableRange(const WritableRange&) = delete;
  WritableRange& operator=(const WritableRange&) = delete;

  static Status make(void* addr, std::size_t len, WritableRange* out,
                     std::error_code* ec = nullptr) noexcept;
  // Restores protection now; idempotent.
  Status restore(std::error_code* ec = nullptr) noexcept;
  bool valid() const noexcept { return len_ != 0; }

 private:
  std::uintptr_t begin_ = 0;  // page-aligned
  std::size_t len_ = 0;       // page multiple
  int old_prot_ = 0;
  int slot_ = -1;
};

// True when [addr, addr+len) lies inside a registered writable range (WritableRange or
// CodeBlock). Lock-free; async-signal-safe.
bool is_writable(const void* addr, std::size_t len) noexcept;

// Anonymous RWX memory, registered writable for its lifetime. With `near` set, the block
// lies entirely within +-(2 GiB - 64 KiB) of `near` so any byte of it is rel32-reachable
// from any instruction near `near`; out_of_range if no such hole exists.
class CodeBlock {
 public:
  CodeBlock() noexcept = default;
  ~CodeBlock();
  CodeBlock(CodeBlock&& other) noexcept;
  CodeBlock& operator=(CodeBlock&& other) noexcept;
  CodeBlock(const CodeBlock&) = delete;
  CodeBlock& operator=(const CodeBlock&) = delete;

  static Status allocate(std::size_t len, const void* near, CodeBlock* out,
                         std::error_code* ec = nullptr) noexcept;
  std::uint8_t* data() const noexcept { return reinterpret_cast<std::uint8_t*>(begin_); }
  std::size_t size() const noexcept { return len_; }

 private:
  std::uintptr_t begin_ = 0;
  std::size_t len_ = 0;
  int slot_ = -1;
};

// True when `target` is reachable by a rel32 from an instruction ending at `next_ip`.
bool rel32_reachable(std::uintptr_t next_ip, std::uintptr_t target) noexcept;

}  // namespace crossmod
