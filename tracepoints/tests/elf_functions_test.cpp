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


// The filtered enumeration is the unfiltered one with the rejected functions taken out:
// aliases collapse before the filter (C++ C1/C2 constructors, libc's __libc_* names share
// addresses: a filter that took a second alias would add entries), and the per-object
// counts still count every function.
TEST(ElfFunctions, FilterKeepsWhatTheUnfilteredListHas) {
  std::vector<ElfFunction> all;
  std::vector<ElfObjectInfo> all_objs;
  ASSERT_TRUE(enumerate_functions(&all, &all_objs));
  const auto prefix = [](std::string_view p) {
    return [p](std::string_view name, const std::string&) { return name.substr(0, p.size()) == p; };
  };
  const auto c1 = [](std::string_view name, const std::string&) {
    return name.find("C1E") != std::string_view::npos;
  };
  const FunctionFilter filters[] = {prefix("__"), prefix("mem"), c1,
                                    [](std::string_view, const std::string& o) {
                                      return o.find("libc.so") != std::string::npos;
                                    }};
  for (const FunctionFilter& keep : filters) {
    std::vector<ElfFunction> got;
    std::vector<ElfObjectInfo> objs;
    ASSERT_TRUE(enumerate_functions(&got, &objs, keep));
    std::vector<const ElfFunction*> want;
    for (const ElfFunction& f : all)
      if (keep(f.name, f.object)) want.push_back(&f);
    ASSERT_FALSE(want.empty());
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].name, want[i]->name);
      EXPECT_EQ(got[i].addr, want[i]->addr);
      EXPECT_EQ(got[i].size, want[i]->size);
      EXPECT_EQ(got[i].object, want[i]->object);
      EXPECT_EQ(got[i].from_symtab, want[i]->from_symtab);
    }
    ASSERT_EQ(objs.size(), all_objs.size());
    for (std::size_t i = 0; i < objs.size(); ++i) EXPECT_EQ(objs[i].functions, all_objs[i].functions);
  }
  // Nothing accepted: nothing appended.
  std::vector<ElfFunction> none;
  ASSERT_TRUE(enumerate_functions(&none, nullptr, [](std::string_view, const std::string&) { return false; }));
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace crossmod::tp
