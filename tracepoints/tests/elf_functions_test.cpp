// The ELF provider on this test binary: a function defined here is found by name with its
// runtime address and size, and an entry tracepoint on that compiler-generated code (made
// writable through code_memory, installed, called, removed) counts and keeps semantics.
#include "crossmod/elf_functions.hpp"

#include <cxxabi.h>
#include <fnmatch.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

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

// object_of names an object as the enumeration does: the function's own entry's object.
TEST(ElfFunctions, ObjectOfAgreesWithTheEnumeration) {
  std::vector<ElfFunction> fns;
  ASSERT_TRUE(enumerate_functions(&fns, nullptr));
  const ElfFunction* own = find(fns, "crossmod_tp_elf_target");
  const ElfFunction* libc = find(fns, "memcpy");
  ASSERT_NE(own, nullptr);
  ASSERT_NE(libc, nullptr);
  EXPECT_EQ(object_of(own->addr), own->object);
  EXPECT_EQ(object_of(libc->addr), libc->object);
  EXPECT_NE(own->object, libc->object);
  int on_stack = 0;
  EXPECT_EQ(object_of(reinterpret_cast<std::uintptr_t>(&on_stack)), "");
  EXPECT_EQ(object_of(0), "");
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


// The object filter: only the accepted objects are read, each asked once, and what they
// give is what the unfiltered list has for them (libc here: a prefix filter on top too).
TEST(ElfFunctions, ObjectFilterReadsOnlyTheAcceptedObjects) {
  std::vector<ElfFunction> all;
  std::vector<ElfObjectInfo> all_objs;
  ASSERT_TRUE(enumerate_functions(&all, &all_objs));
  const auto is_libc = [](const std::string& o) { return o.find("/libc.so") != std::string::npos; };
  std::vector<std::string> asked;
  const ObjectFilter want = [&](const std::string& o) {
    asked.push_back(o);
    return is_libc(o);
  };
  const FunctionFilter keep = [](std::string_view name, const std::string&) { return name.substr(0, 3) == "mem"; };
  std::vector<ElfFunction> got;
  std::vector<ElfObjectInfo> objs;
  ASSERT_TRUE(enumerate_functions(&got, &objs, want, keep));
  ASSERT_EQ(asked.size(), all_objs.size());  // once per object with a file
  ASSERT_EQ(objs.size(), 1u);
  EXPECT_TRUE(is_libc(objs[0].path));
  std::vector<const ElfFunction*> expect;
  for (const ElfFunction& f : all)
    if (is_libc(f.object) && keep(f.name, f.object)) expect.push_back(&f);
  ASSERT_FALSE(expect.empty());
  ASSERT_EQ(got.size(), expect.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, expect[i]->name);
    EXPECT_EQ(got[i].addr, expect[i]->addr);
  }
  // No object accepted: nothing read, nothing appended.
  std::vector<ElfFunction> none;
  std::vector<ElfObjectInfo> none_objs;
  ASSERT_TRUE(enumerate_functions(&none, &none_objs, [](const std::string&) { return false; }, nullptr));
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(none_objs.empty());
}

// demangled_cannot_match() on the C++ functions of every object loaded here (libstdc++,
// gtest: thousands): every first word of a demangling that is not in its mangled name is
// one the function knows (never ruled out), and for patterns made of the first words
// seen (whole, capitalised, cut to 1-2 characters), a "cannot match" is never
// contradicted by fnmatch on the real demangling.
TEST(ElfFunctions, DemangledCannotMatchAgreesWithTheDemangler) {
  std::vector<ElfFunction> fns;
  ASSERT_TRUE(enumerate_functions(&fns));
  std::vector<std::pair<std::string, std::string>> names;  // (mangled, demangled)
  std::set<std::string> words;
  std::size_t vocabulary_first = 0;
  for (const ElfFunction& f : fns) {
    if (f.name.rfind("_Z", 0) != 0) continue;
    int rc = -1;
    char* d = abi::__cxa_demangle(f.name.c_str(), nullptr, nullptr, &rc);
    const std::string dem = rc == 0 && d != nullptr ? d : f.name;
    std::free(d);
    names.emplace_back(f.name, dem);
    std::size_t n = 0;
    while (n < dem.size() && (std::isalnum(static_cast<unsigned char>(dem[n])) != 0 || dem[n] == '_')) ++n;
    const std::string w = dem.substr(0, n);
    const char k = f.name.size() > 2 ? f.name[2] : '\0';
    if (k != 'T' && k != 'G' && k != 'Z' && !w.empty() && f.name.find(w) == std::string::npos) {
      // Not from the mangled name: a word the demangler writes, which must never be ruled
      // out (a pattern that is a prefix of it is never decided).
      EXPECT_FALSE(demangled_cannot_match(f.name, w + "*")) << f.name << " -> " << dem;
      ++vocabulary_first;
    }
    if (!w.empty()) words.insert(w);
  }
  ASSERT_GT(names.size(), 1000u);
  std::vector<std::string> patterns = {"Py*", "PyObject*", "Foo::*", "Z*", "Xy?z*", "Ab[c]*",
                                      "sqlite3_*", "work_*", "vo*", "st*", "_Z*", "_Zfoo*"};
  for (const std::string& w : words) {
    std::string cap = w;
    cap[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(cap[0])));
    patterns.push_back(w + "*");
    patterns.push_back(cap + "*");
    patterns.push_back(cap.substr(0, 2) + "*");
    patterns.push_back(w.substr(0, 2) + "*");
    patterns.push_back(w.substr(0, 1) + "*");
  }
  std::size_t decided = 0;
  for (const std::string& p : patterns) {
    const DemangledMatchTest test(p);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& [mangled, dem] = names[i];
      if (i % 64 == 0) {
        ASSERT_EQ(test.cannot_match(mangled), demangled_cannot_match(mangled, p));
      }
      if (test.cannot_match(mangled)) {
        ++decided;
        ASSERT_NE(fnmatch(p.c_str(), dem.c_str(), 0), 0) << p << " matches " << dem << " (" << mangled << ")";
      }
    }
  }
  EXPECT_GT(decided, 1000u);  // the shortcut does decide
  std::printf("%zu C++ functions, %zu first words, %zu patterns: %zu (name, pattern) decided\n",
              names.size(), words.size(), patterns.size(), decided);
  // What it never decides: a lowercase or wildcard start, special and local names, a word
  // the mangled name holds.
  EXPECT_TRUE(demangled_cannot_match("_ZN3foo3barEv", "sqlite3_*"));
  EXPECT_FALSE(demangled_cannot_match("_ZN3foo3barEv", "std*"));
  EXPECT_FALSE(demangled_cannot_match("_Z3fooIiEvv", "vo*"));  // "void foo<int>()"
  EXPECT_FALSE(demangled_cannot_match("_Z3fooIiEDF16_v", "_Float16*"));  // "_Float16 foo<int>()"
  EXPECT_FALSE(demangled_cannot_match("_Z3fooIiEDF32x_v", "_Float32x*"));
  EXPECT_FALSE(demangled_cannot_match("_ZN3foo3barEv", "fo*"));
  EXPECT_GT(vocabulary_first, 0u);  // return types: "void", "bool", ... were seen
  EXPECT_FALSE(demangled_cannot_match("_ZN3foo3barEv", "*Py*"));
  EXPECT_FALSE(demangled_cannot_match("_ZTV3Foo", "Py*"));
  EXPECT_FALSE(demangled_cannot_match("_ZGVZ3foovE1x", "Py*"));
  EXPECT_FALSE(demangled_cannot_match("_ZZ3foovE3Bar", "Py*"));
  EXPECT_FALSE(demangled_cannot_match("_ZN5PyFoo3barEv", "PyF*"));
  EXPECT_FALSE(demangled_cannot_match("Py_Foo", "Py*"));  // not mangled
  EXPECT_TRUE(demangled_cannot_match("_ZN3foo3barEv", "Py*"));
  EXPECT_TRUE(demangled_cannot_match("_ZNSt6vectorIiSaIiEE9push_backERKi", "Py*"));
}

}  // namespace
}  // namespace crossmod::tp
