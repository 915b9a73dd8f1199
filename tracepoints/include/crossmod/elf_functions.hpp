// Enumeration of the functions of every object loaded in this process, from each file's
// .symtab when present and .dynsym otherwise (the ELF provider for tracepoints).
// Thread safety: thread-safe; allocates and reads files: never call it from a signal
// handler or an invocation path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace crossmod::tp {

struct ElfFunction {
  std::string name;
  std::uintptr_t addr = 0;   // runtime address (load bias applied)
  std::size_t size = 0;      // st_size: bytes to the function's end
  std::string object;        // path of the file it came from
  bool from_symtab = false;  // false: .dynsym
};

struct ElfObjectInfo {
  std::string path;
  std::uintptr_t text_begin = 0, text_end = 0;  // executable PT_LOAD span (page-rounded)
  bool has_symtab = false;
  std::size_t functions = 0;
};

// Appends the defined STT_FUNC symbols with a non-zero size that lie inside an executable
// PT_LOAD segment of their object, one entry per address (aliases collapse into the first
// name seen). Objects without a file (vdso) are skipped. Returns false only if
// dl_iterate_phdr found nothing; unreadable files are skipped and reported in `objects`
// with functions == 0.
bool enumerate_functions(std::vector<ElfFunction>* out,
                         std::vector<ElfObjectInfo>* objects = nullptr);

// The same, appending only the functions `keep` accepts, asked with each function's (raw,
// mangled) name and object path after the aliases collapsed: the result is the
// unfiltered one with the others taken out (ElfObjectInfo::functions still counts them
// all). Nothing is allocated for a rejected function, which is most of the cost when a
// pattern selects a few hundred of the tens of thousands of functions of a process.
using FunctionFilter = std::function<bool(std::string_view name, const std::string& object)>;
bool enumerate_functions(std::vector<ElfFunction>* out, std::vector<ElfObjectInfo>* objects,
                         const FunctionFilter& keep);
// The same, reading only the objects `want` accepts (asked once per object with its path;
// the others are not opened and not in `objects`): a pattern on the object need not cost
// a walk of every other object's symbol table.
using ObjectFilter = std::function<bool(const std::string& object)>;
bool enumerate_functions(std::vector<ElfFunction>* out, std::vector<ElfObjectInfo>* objects,
                         const ObjectFilter& want, const FunctionFilter& keep);

// The path enumerate_functions gives the loaded object whose executable segment holds
// `code` (the main program: its /proc/self/exe link); empty when none does.
std::string object_of(std::uintptr_t code);

// True when no demangling of the C++ symbol `mangled` ("_Z...") can match the fnmatch(3)
// `pattern` (flags 0), decided without demangling (~1.5 us a name: libstdc++ alone has
// 3,839 functions, in every process the preload libraries are in): the pattern starts
// with a word (letters, digits, '_') that is neither in the mangled name nor the start of
// a word the demangler writes itself. The demangling of an ordinary function name (not a
// special "_ZT"/"_ZG" name, not a local "_ZZ" entity) starts with a source identifier,
// held verbatim in the mangled name, or with a type or keyword (void, std, operator,
// decltype, _Float...); a name that does not demangle is matched raw ("_Z..."). False
// whenever that does not decide it (a pattern starting with a wildcard, "std*", ...).
// The pattern's part is decided once (DemangledMatchTest, which keeps a view into the
// pattern: it must outlive the object); each name then costs one substring search.
bool demangled_cannot_match(std::string_view mangled, std::string_view pattern) noexcept;
class DemangledMatchTest {
 public:
  explicit DemangledMatchTest(std::string_view pattern) noexcept;
  bool cannot_match(std::string_view mangled) const noexcept;

 private:
  std::string_view lead_;  // the pattern's leading word; empty: never decides
};

}  // namespace crossmod::tp
