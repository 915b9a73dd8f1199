// callpatch: wait-free toggling of a 5-byte `call rel32` site, one store into one line
// per toggle (see callpatch.hpp for the byte states). Thread safety: one toggler per site;
// prepare() may run concurrently (the trampoline pool is guarded by a mutex). activate /
// deactivate are lock-free and do not allocate; not async-signal-safe by contract.
#include "crossmod/callpatch.hpp"

#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <span>

#include "crossmod/code_memory.hpp"
#include "crossmod/x86.hpp"

namespace crossmod {

namespace {

// ---- ret trampolines for split 1 --------------------------------------------------------
// One page per 2 GiB neighbourhood, holding a single `ret` followed by invalid opcodes.
// Blocks are never freed: sites may point at them for the life of the process.
inline constexpr int kMaxTrampolines = 64;
inline constexpr std::size_t kTrampolineSize = 4096;

std::mutex g_tramp_mutex;
std::uint8_t* g_tramps[kMaxTrampolines];
int g_tramp_count = 0;
// Storage for the blocks, constructed in place and never destroyed: no heap allocation
// to leak, and no static destructor unmapping a trampoline another thread may still call.
alignas(CodeBlock) unsigned char g_tramp_blocks[kMaxTrampolines][sizeof(CodeBlock)];

bool reaches(const std::uint8_t* site, const std::uint8_t* tramp) noexcept {
  return rel32_reachable(reinterpret_cast<std::uintptr_t>(site) + x86::kCallLen,
                         reinterpret_cast<std::uintptr_t>(tramp));
}

bool is_trampoline(std::uintptr_t target) noexcept {
  std::lock_guard<std::mutex> lock(g_tramp_mutex);
  for (int i = 0; i < g_tramp_count; ++i)
    if (reinterpret_cast<std::uintptr_t>(g_tramps[i]) == target) return true;
  return false;
}

Status trampoline_near(const std::uint8_t* site, std::uint8_t** out) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_tramp_mutex);
    for (int i = 0; i < g_tramp_count; ++i)
      if (reaches(site, g_tramps[i])) {
        *out = g_tramps[i];
        return Status::ok;
      }
    if (g_tramp_count == kMaxTrampolines) return Status::table_full;
    CodeBlock fresh;
    const Status s = CodeBlock::allocate(kTrampolineSize, site, &fresh);
    if (s != Status::ok) return s;
    if (!reaches(site, fresh.data())) return Status::out_of_range;  // allocate() promised
    auto* block = new (g_tramp_blocks[g_tramp_count]) CodeBlock(std::move(fresh));
    std::uint8_t* t = block->data();
    std::memset(t, x86::kInvalid64, block->size());
    t[0] = x86::kRet;
    g_tramps[g_tramp_count++] = t;
    *out = t;
    return Status::ok;
  } catch (...) {  // std::mutex::lock may throw std::system_error
    return Status::os_error;
  }
}

using Bytes5 = std::array<std::uint8_t, 5>;

// The bytes a toggle rewrites, by split (| is the line boundary):
//   split 0:  E8 r0 r1 r2 r3  <->  0F 1F 44 00 00     all 5, one line
//   split 1:  E8 | r0 r1 r2 r3 <-> E8 | t0 t1 t2 t3   rel32 only, back line
//   split 2:  E8 r0 | r1 r2 r3 <-> EB 03 | r1 r2 r3   first two bytes, front line
//   (splits 3 and 4 likewise: the two changed bytes are in the front line)
std::span<const std::uint8_t> toggled_part(unsigned split, const Bytes5& b, std::size_t* offset) {
  if (split == 0) {
    *offset = 0;
    return {b.data(), b.size()};
  }
  if (split == 1) {
    *offset = 1;
    return {b.data() + 1, 4};
  }
  *offset = 0;
  return {b.data(), 2};
}

}  // namespace

Status CallSite::prepare(void* addr, const void* target, CallSite* out) noexcept {
  if (addr == nullptr || out == nullptr) return Status::bad_address;
  auto* site = static_cast<std::uint8_t*>(addr);
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (!is_writable(addr, x86::kCallLen)) return Status::not_writable;
  CallSite cs;
  cs.addr_ = site;
  cs.split_ = x86::straddle_split(a, x86::kCallLen);
  if (Status s = x86::encode_call(a, reinterpret_cast<std::uintptr_t>(target), &cs.active_);
      s != Status::ok)
    return s;

  Bytes5 current;
  std::memcpy(current.data(), site, current.size());

  switch (cs.split_) {
    case 0:
      cs.inactive_ = x86::kNop5;
      break;
    case 1: {
      // Keep the trampoline the site already calls, if it is one of ours.
      std::uintptr_t cur_target = 0;
      if (current != cs.active_ && x86::decode_call(current.data(), a, &cur_target) &&
          is_trampoline(cur_target)) {
        cs.inactive_ = current;
        break;
      }
      std::uint8_t* tramp = nullptr;
      if (Status s = trampoline_near(site, &tramp); s != Status::ok) return s;
      if (Status s = x86::encode_call(a, reinterpret_cast<std::uintptr_t>(tramp), &cs.inactive_);
          s != Status::ok)
        return s;
      break;
    }
    default: {
      cs.inactive_ = cs.active_;
      const auto jmp = x86::short_jump_over_call();
      cs.inactive_[0] = jmp[0];
      cs.inactive_[1] = jmp[1];
      break;
    }
  }
  if (current != cs.active_ && current != cs.inactive_) return Status::bad_bytes;
  *out = cs;
  return Status::ok;
}

Status CallSite::activate() noexcept {
  if (addr_ == nullptr) return Status::bad_address;
  if (!is_writable(addr_, x86::kCallLen)) return Status::not_writable;
  std::size_t offset = 0;
  const auto part = toggled_part(split_, active_, &offset);
  // One LOCK CMPXCHG into one line: a concurrent fetch sees the whole old or the whole new
  // line, and both combinations with the untouched line are complete instructions.
  return x86::store_locked(addr_ + offset, part);
}

Status CallSite::deactivate() noexcept {
  if (addr_ == nullptr) return Status::bad_address;
  if (!is_writable(addr_, x86::kCallLen)) return Status::not_writable;
  std::size_t offset = 0;
  const auto part = toggled_part(split_, inactive_, &offset);
  return x86::store_locked(addr_ + offset, part);
}

bool CallSite::active() const noexcept {
  if (addr_ == nullptr) return false;
  return std::memcmp(addr_, active_.data(), active_.size()) == 0;
}

}  // namespace crossmod
