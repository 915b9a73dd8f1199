// Loaded ELF objects, their executable segments, symbols and sections (see objects.hpp).
// Thread safety: callers hold the registry mutex. Reads files with open/mmap; allocates.
#include "objects.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

namespace crossmod::probes::detail {

namespace {

// Never destroyed: hooks may run during exit, after static destructors.
std::vector<Object*>& objects() {
  static auto* list = new std::vector<Object*>();
  return *list;
}

std::deque<std::string>& strings() {
  static auto* s = new std::deque<std::string>();
  return *s;
}

// A read-only private mapping of a whole file, unmapped on scope exit.
struct MappedFile {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  explicit MappedFile(const std::string& path) noexcept {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(Elf64_Ehdr))) {
      void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data = static_cast<const std::uint8_t*>(p);
        size = static_cast<std::size_t>(st.st_size);
      }
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data != nullptr) ::munmap(const_cast<std::uint8_t*>(data), size);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The section header table, validated; nullptr if the file is not a usable ELF64.
  const Elf64_Shdr* sections(std::size_t* n) const noexcept {
    if (data == nullptr) return nullptr;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(data);
    if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
      return nullptr;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shoff + std::size_t{eh->e_shnum} * sizeof(Elf64_Shdr) > size)
      return nullptr;
    *n = eh->e_shnum;
    return reinterpret_cast<const Elf64_Shdr*>(data + eh->e_shoff);
  }
  bool in_file(std::uint64_t off, std::uint64_t len) const noexcept {
    return off <= size && len <= size - off;
  }
};

int add_object(dl_phdr_info* info, std::size_t, void*) {
  auto& list = objects();
  const std::uintptr_t bias = info->dlpi_addr;
  std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const bool main_program = path.empty();
  for (Object* o : list)
    if (o->bias == bias && (o->path == path || (main_program && o->path == "/proc/self/exe")))
      return 0;
  auto obj = std::make_unique<Object>();
  obj->bias = bias;
  if (main_program) {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    obj->display = intern(n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "(main)");
    obj->path = "/proc/self/exe";
  } else {
    obj->display = intern(path);
    obj->path = path;
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
    Segment s;
    s.begin = bias + ph.p_vaddr;
    s.end = s.begin + ph.p_memsz;
    obj->exec.push_back(std::move(s));
  }
  list.push_back(obj.release());
  return 0;
}

Object* find_code(std::uintptr_t addr, std::size_t len, Segment** seg) noexcept {
  for (Object* o : objects())
    for (Segment& s : o->exec)
      if (addr >= s.begin && addr + len <= s.end) {
        if (seg != nullptr) *seg = &s;
        return o;
      }
  return nullptr;
}

void load_symbols(Object* obj) noexcept {
  obj->symbols_loaded = true;
  try {
    MappedFile f(obj->path);
    std::size_t n = 0;
    const Elf64_Shdr* sh = f.sections(&n);
    if (sh == nullptr) return;
    // .symtab has static functions too; .dynsym is the fallback for stripped objects.
    for (const unsigned want : {unsigned{SHT_SYMTAB}, unsigned{SHT_DYNSYM}}) {
      for (std::size_t i = 0; i < n; ++i) {
        if (sh[i].sh_type != want || sh[i].sh_link >= n) continue;
        const Elf64_Shdr& strs = sh[sh[i].sh_link];
        if (!f.in_file(sh[i].sh_offset, sh[i].sh_size) || !f.in_file(strs.sh_offset, strs.sh_size))
          continue;
        const auto* syms = reinterpret_cast<const Elf64_Sym*>(f.data + sh[i].sh_offset);
        const std::size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
        const char* strtab = reinterpret_cast<const char*>(f.data + strs.sh_offset);
        for (std::size_t k = 0; k < count; ++k) {
          const Elf64_Sym& s = syms[k];
          const unsigned type = ELF64_ST_TYPE(s.st_info);
          if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s.st_value == 0 ||
              s.st_shndx == SHN_UNDEF || s.st_name >= strs.sh_size)
            continue;
          const char* raw = strtab + s.st_name;
          int rc = -1;
          char* dem = abi::__cxa_demangle(raw, nullptr, nullptr, &rc);
          const char* name = intern(rc == 0 && dem != nullptr ? dem : raw);
          std::free(dem);
          obj->symbols.push_back({obj->bias + s.st_value, s.st_size, name});
        }
      }
      if (!obj->symbols.empty()) break;
    }
    std::sort(obj->symbols.begin(), obj->symbols.end(),
              [](const Symbol& a, const Symbol& b) { return a.addr < b.addr; });
  } catch (...) {
    obj->symbols.clear();
  }
}

}  // namespace

const char* intern(const std::string& s) noexcept {
  try {
    return strings().emplace_back(s).c_str();
  } catch (...) {
    return "?";
  }
}

namespace {
bool g_first_refresh_done = false;  // registry mutex
}  // namespace

std::vector<Object*>& refresh_objects() noexcept {
  try {
    dl_iterate_phdr(add_object, nullptr);
  } catch (...) {
  }
  if (!g_first_refresh_done) {
    g_first_refresh_done = true;
    for (Object* o : objects()) o->startup = true;
  }
  return objects();
}

namespace {
std::mutex g_pin_mutex;  // after the registry mutex, never before it
std::vector<Object*>* g_to_pin = nullptr;  // guarded by g_pin_mutex; leaked
std::atomic<bool> g_pin_pending{false};

void request_pin(Object* o) noexcept {
  // Objects loaded with the program (the main program among them) are never unloaded;
  // a dlopen of one while start-up constructors run could run its constructors early.
  if (o == nullptr || o->pin_requested || o->startup || o->path == "/proc/self/exe") return;
  try {
    std::lock_guard<std::mutex> lock(g_pin_mutex);
    if (g_to_pin == nullptr) g_to_pin = new std::vector<Object*>();
    g_to_pin->push_back(o);
    o->pin_requested = true;
    g_pin_pending.store(true, std::memory_order_release);
  } catch (...) {
    // Not queued: the next lookup in this object tries again.
  }
}
}  // namespace

Object* object_for_code(std::uintptr_t addr, std::size_t len, Segment** seg) noexcept {
  Object* o = find_code(addr, len, seg);
  if (o == nullptr) {
    refresh_objects();
    o = find_code(addr, len, seg);
  }
  request_pin(o);
  return o;
}

void pin_requested_objects() noexcept {
  if (!g_pin_pending.load(std::memory_order_acquire)) return;
  std::vector<Object*> todo;
  {
    std::lock_guard<std::mutex> lock(g_pin_mutex);
    if (g_to_pin != nullptr) todo.swap(*g_to_pin);
    g_pin_pending.store(false, std::memory_order_relaxed);
  }
  // Object::path is immutable once the object is listed. The handle is never closed: it
  // and RTLD_NODELETE each keep the object mapped. NOLOAD fails for the vDSO, which
  // holds no probes, and for an object dlclose'd before we got here (the caller's race).
  for (Object* o : todo) (void)dlopen(o->path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

Status ensure_writable(Segment* seg) noexcept {
  if (!seg->tried) {
    seg->tried = true;
    const crossmod::Status s =
        WritableRange::make(reinterpret_cast<void*>(seg->begin), seg->end - seg->begin,
                            &seg->writable);
    seg->writable_status = s == crossmod::Status::ok ? Status::ok : Status::not_writable;
  }
  return seg->writable_status;
}

const Symbol* symbol_for(Object* obj, std::uintptr_t addr) noexcept {
  if (!obj->symbols_loaded) load_symbols(obj);
  const auto& v = obj->symbols;
  auto it = std::upper_bound(v.begin(), v.end(), addr,
                             [](std::uintptr_t a, const Symbol& s) { return a < s.addr; });
  // Several symbols may share an address (aliases); any containing one will do.
  while (it != v.begin()) {
    --it;
    if (addr >= it->addr && (addr < it->addr + it->size || (it->size == 0 && addr == it->addr)))
      return &*it;
    if (it->addr + 4096 < addr) break;
  }
  return nullptr;
}

const Symbol* symbol_starting_in(Object* obj, std::uintptr_t begin, std::uintptr_t end) noexcept {
  if (!obj->symbols_loaded) load_symbols(obj);
  const auto& v = obj->symbols;
  auto it = std::lower_bound(v.begin(), v.end(), begin,
                             [](const Symbol& s, std::uintptr_t a) { return s.addr < a; });
  if (it != v.end() && it->addr < end) return &*it;
  return nullptr;
}

std::vector<std::pair<std::uintptr_t, std::size_t>> sections_named(const Object& obj,
                                                                    const char* name) noexcept {
  std::vector<std::pair<std::uintptr_t, std::size_t>> out;
  try {
    MappedFile f(obj.path);
    std::size_t n = 0;
    const Elf64_Shdr* sh = f.sections(&n);
    if (sh == nullptr) return out;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(f.data);
    if (eh->e_shstrndx >= n) return out;
    const Elf64_Shdr& names = sh[eh->e_shstrndx];
    if (!f.in_file(names.sh_offset, names.sh_size)) return out;
    const char* shstr = reinterpret_cast<const char*>(f.data + names.sh_offset);
    for (std::size_t i = 0; i < n; ++i) {
      if (sh[i].sh_name >= names.sh_size || (sh[i].sh_flags & SHF_ALLOC) == 0) continue;
      if (std::strncmp(shstr + sh[i].sh_name, name, names.sh_size - sh[i].sh_name) != 0) continue;
      out.emplace_back(obj.bias + sh[i].sh_addr, sh[i].sh_size);
    }
  } catch (...) {
    out.clear();
  }
  return out;
}

}  // namespace crossmod::probes::detail
