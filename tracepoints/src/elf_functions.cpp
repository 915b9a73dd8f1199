// ELF symbol enumeration for the tracepoint provider: dl_iterate_phdr for the loaded
// objects and their load bias, then each object's file mapped read-only and its .symtab
// (or .dynsym) walked. Thread safety: reentrant; allocates; not async-signal-safe.
#include "crossmod/elf_functions.hpp"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace crossmod::tp {

namespace {

struct Loaded {
  std::string path;
  std::uintptr_t bias;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> exec;  // runtime [begin, end)
};

int collect(dl_phdr_info* info, std::size_t, void* data) {
  auto* v = static_cast<std::vector<Loaded>*>(data);
  Loaded l;
  l.bias = info->dlpi_addr;
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
    l.path = info->dlpi_name;
  } else if (v->empty()) {
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) l.path.assign(buf, static_cast<std::size_t>(n));
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) != 0)
      l.exec.emplace_back(l.bias + ph.p_vaddr, l.bias + ph.p_vaddr + ph.p_memsz);
  }
  v->push_back(std::move(l));
  return 0;
}

// Walks one file's symbol table; false if the file cannot be read as ELF64. Appends the
// functions `keep` accepts (all when null), one per address: of aliases, the first in
// table order. *count: functions after collapsing aliases, accepted or not.
bool read_symbols(const Loaded& l, const FunctionFilter* keep, std::vector<ElfFunction>* out,
                  bool* has_symtab, std::size_t* count) {
  const int fd = ::open(l.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return false;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return false;
  const auto* base = static_cast<const std::uint8_t*>(m);
  bool ok = false;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto in_file = [&](std::size_t off, std::size_t len) {
    return off <= size && len <= size - off;
  };
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      eh->e_shentsize == sizeof(Elf64_Shdr) &&
      in_file(eh->e_shoff, std::size_t{eh->e_shnum} * sizeof(Elf64_Shdr))) {
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    const Elf64_Shdr* table = nullptr;
    for (int want : {SHT_SYMTAB, SHT_DYNSYM}) {
      for (unsigned i = 0; i < eh->e_shnum && table == nullptr; ++i)
        if (sh[i].sh_type == static_cast<unsigned>(want) && sh[i].sh_link < eh->e_shnum)
          table = &sh[i];
      if (table != nullptr) {
        *has_symtab = want == SHT_SYMTAB;
        break;
      }
    }
    if (table != nullptr && in_file(table->sh_offset, table->sh_size)) {
      const Elf64_Shdr& strs = sh[table->sh_link];
      if (in_file(strs.sh_offset, strs.sh_size)) {
        ok = true;
        const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + table->sh_offset);
        const std::size_t n = table->sh_size / sizeof(Elf64_Sym);
        const char* names = reinterpret_cast<const char*>(base + strs.sh_offset);
        // (runtime address, symbol index) of every function symbol inside the text.
        std::vector<std::pair<std::uintptr_t, std::size_t>> fn;
        for (std::size_t i = 0; i < n; ++i) {
          const Elf64_Sym& s = syms[i];
          if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_shndx == SHN_UNDEF || s.st_size == 0 ||
              s.st_value == 0 || s.st_name >= strs.sh_size)
            continue;
          const std::uintptr_t a = l.bias + s.st_value;
          const bool in_text = std::any_of(l.exec.begin(), l.exec.end(), [&](const auto& r) {
            return a >= r.first && a + s.st_size <= r.second;
          });
          if (in_text) fn.emplace_back(a, i);
        }
        // Aliases collapse into the first symbol of their address; then table order again
        // (a mark per symbol: cheaper than sorting back).
        std::sort(fn.begin(), fn.end());
        std::vector<bool> first(n, false);
        for (std::size_t k = 0; k < fn.size(); ++k)
          if (k == 0 || fn[k].first != fn[k - 1].first) {
            first[fn[k].second] = true;
            ++*count;
          }
        for (std::size_t i = 0; i < n; ++i) {
          if (!first[i]) continue;
          const Elf64_Sym& s = syms[i];
          const std::uintptr_t a = l.bias + s.st_value;
          const char* nm = names + s.st_name;
          const std::size_t nlen = strnlen(nm, strs.sh_size - s.st_name);
          if (keep != nullptr && !(*keep)(std::string_view(nm, nlen), l.path)) continue;
          ElfFunction f;
          f.name.assign(nm, nlen);
          f.addr = a;
          f.size = s.st_size;
          f.object = l.path;
          f.from_symtab = *has_symtab;
          out->push_back(std::move(f));
        }
      }
    }
  }
  ::munmap(m, size);
  return ok;
}

bool enumerate(std::vector<ElfFunction>* out, std::vector<ElfObjectInfo>* objects,
               const ObjectFilter* want, const FunctionFilter* keep) {
  std::vector<Loaded> loaded;
  dl_iterate_phdr(collect, &loaded);
  if (loaded.empty()) return false;
  // Objects occupy disjoint address ranges and a function lies inside its own object's
  // text, so collapsing aliases per object gives one entry per address overall.
  for (const Loaded& l : loaded) {
    if (l.path.empty() || l.exec.empty()) continue;
    if (want != nullptr && !(*want)(l.path)) continue;
    ElfObjectInfo info;
    info.path = l.path;
    info.text_begin = l.exec.front().first;
    info.text_end = l.exec.back().second;
    read_symbols(l, keep, out, &info.has_symtab, &info.functions);
    if (objects != nullptr) objects->push_back(std::move(info));
  }
  return true;
}

}  // namespace

namespace {
// Every word the demangler may write first for an ordinary function name without taking
// it from the mangled name: builtin and extended types and the keywords of a return type
// or of an operator's name (the Itanium ABI's builtin types, GNU's extensions), with the
// rest of the C++ keywords for margin. ElfFunctions.DemangledCannotMatchAgreesWithTheDemangler
// checks the claim on every C++ function loaded in the test.
constexpr std::string_view kFirstWords[] = {
    "alignas", "alignof", "and", "asm", "auto", "bitand", "bitor", "bool", "char", "char8_t",
    "char16_t", "char32_t", "class", "co_await", "compl", "complex", "concept", "const",
    "consteval", "constexpr", "constinit", "const_cast", "decimal32", "decimal64",
    "decimal", "decimal128", "decltype", "delete", "double", "dynamic_cast", "enum", "false", "float",
    "friend", "half", "imaginary", "int", "long", "new", "noexcept", "not", "nullptr",
    "operator", "or", "reinterpret_cast", "requires", "restrict", "short", "signed",
    "sizeof", "static_cast", "std", "struct", "template", "this", "throw", "true",
    "typeid", "typename", "union", "unsigned", "virtual", "void", "volatile", "wchar_t",
    "xor", "_Accum", "_BitInt", "_Complex", "_Float", "_Fract", "_Imaginary", "_Sat",
    "__bf16", "__float128", "__float80", "__ibm128", "__ieee128", "__int128", "__vector",
};
}  // namespace

DemangledMatchTest::DemangledMatchTest(std::string_view pattern) noexcept {
  std::size_t n = 0;
  const auto word_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  while (n < pattern.size() && word_char(pattern[n])) ++n;
  const std::string_view lead = pattern.substr(0, n);
  if (lead.empty()) return;  // a wildcard or punctuation first: undecided
  // The demangled name starts with its first word, so `lead` must begin that word: a
  // source identifier (then lead is in the mangled name) or a word of the demangler's,
  // which may be one of kFirstWords extended ("_Float" 16 "x", "decimal" 32): undecided
  // when lead and a listed word start alike either way.
  for (std::string_view w : kFirstWords)
    if (w.substr(0, lead.size()) == lead || lead.substr(0, w.size()) == w) return;
  lead_ = lead;
}

bool DemangledMatchTest::cannot_match(std::string_view mangled) const noexcept {
  if (lead_.empty() || mangled.substr(0, 2) != "_Z") return false;
  const char kind = mangled.size() > 2 ? mangled[2] : '\0';
  if (kind == 'T' || kind == 'G' || kind == 'Z') return false;  // special or local names
  return mangled.find(lead_) == std::string_view::npos;
}

bool demangled_cannot_match(std::string_view mangled, std::string_view pattern) noexcept {
  return DemangledMatchTest(pattern).cannot_match(mangled);
}

std::string object_of(std::uintptr_t code) {
  std::vector<Loaded> loaded;
  dl_iterate_phdr(collect, &loaded);
  for (const Loaded& l : loaded)
    for (const auto& [begin, end] : l.exec)
      if (code >= begin && code < end) return l.path;
  return {};
}

bool enumerate_functions(std::vector<ElfFunction>* out, std::vector<ElfObjectInfo>* objects) {
  return enumerate(out, objects, nullptr, nullptr);
}

bool enumerate_functions(std::vector<ElfFunction>* out, std::vector<ElfObjectInfo>* objects,
                         const FunctionFilter& keep) {
  return enumerate(out, objects, nullptr, keep ? &keep : nullptr);
}

bool enumerate_functions(std::vector<ElfFunction>* out, std::vector<ElfObjectInfo>* objects,
                         const ObjectFilter& want, const FunctionFilter& keep) {
  return enumerate(out, objects, want ? &want : nullptr, keep ? &keep : nullptr);
}

}  // namespace crossmod::tp
