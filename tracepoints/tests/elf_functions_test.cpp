// The ELF provider on this test binary: a function defined here is found by name with its
// runtime address and size, and an entry tracepoint on that compiler-generated code (made
// writable through code_memory, installed, called, removed) counts and keeps semantics.
#include "crossmod/elf_functions.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "crossmod/code_memory.hpp"
#include "crossmod/tracepoint.hpp"
#include "stress.hpp"

extern "C" __attribute__((noinline, used)) int crossmod_tp_elf_target(int x) {
  int acc = 0;
  for (int i = 0; i < x; ++i) acc += i * i + (acc >> 3);
  asm volatile("" : "+r"(acc));
  return acc;
}

namespace crossmod::tp {
namespace {

int reference(int x) {
  int acc = 0;
  for (int i = 0; i < x; ++i) acc += i * i + (acc >> 3);
  return acc;
}

std::atomic<std::uint64_t> g_elf_hits{0};
void elf_probe(void*) noexcept { g_elf_hits.fetch_add(1); }

const ElfFunction* find(const std::vector<ElfFunction>& fns, const char* name) {
  for (const ElfFunction& f : fns)
    if (f.name == name) return &f;
  return nullptr;
}

TEST(ElfFunctions, FindsOwnFunctionWithAddressAndSize) {
  std::vector<ElfFunction> fns;
  std::vector<ElfObjectInfo> objs;
  ASSERT_TRUE(enumerate_functions(&fns, &objs));
  ASSERT_FALSE(objs.empty());
  const ElfFunction* f = find(fns, "crossmod_tp_elf_target");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->addr, reinterpret_cast<std::uintptr_t>(&crossmod_tp_elf_target));
  EXPECT_GT(f->size, 0u);
  EXPECT_TRUE(f->from_symtab);  // the test binary is not stripped
  // libc is loaded and has functions (from .dynsym at least).
  EXPECT_NE(find(fns, "memcpy"), nullptr);
}

TEST(ElfFunctions, TracepointOnCompiledFunction) {
  std::vector<ElfFunction> fns;
  ASSERT_TRUE(enumerate_functions(&fns));
  const ElfFunction* f = find(fns, "crossmod_tp_elf_target");
  ASSERT_NE(f, nullptr);
  WritableRange w;
  ASSERT_EQ(WritableRange::make(reinterpret_cast<void*>(f->addr), f->size, &w),
            crossmod::Status::ok);
  Tracepoint tp;
  const Status s = Tracepoint::prepare(reinterpret_cast<void*>(f->addr), f->size, elf_probe,
                                       nullptr, &tp, nullptr, /*trap_fallback=*/true);
  ASSERT_EQ(s, Status::ok) << to_string(s);
  ASSERT_EQ(tp.install(test::stress_wait()), Status::ok);
  int (*volatile fn)(int) = &crossmod_tp_elf_target;
  const std::uint64_t h0 = g_elf_hits.load();
  for (int x = 0; x < 50; ++x) ASSERT_EQ(fn(x), reference(x)) << x;
  EXPECT_EQ(g_elf_hits.load() - h0, 50u);
  ASSERT_EQ(tp.remove(test::stress_wait()), Status::ok);
  EXPECT_EQ(fn(10), reference(10));
  EXPECT_EQ(g_elf_hits.load() - h0, 50u);
}

}  // namespace
}  // namespace crossmod::tp
