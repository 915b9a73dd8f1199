// Remote memory and ELF lookups for live attach (see remote_elf.hpp). Formats: the System
// V gABI (ELF header, program headers, dynamic section, DT_HASH) and the GNU hash table
// as glibc's dl-lookup.c reads it (bloom filter skipped: the chains decide).
// Thread safety: reentrant; allocates; blocking pread/pwrite on /proc files.
#include "attach/remote_elf.hpp"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

namespace crossmod::harness::attach {

namespace {

constexpr std::size_t kPage = 4096;
constexpr int kMaxPhdrs = 64;
constexpr int kMaxDynamic = 1024;
constexpr int kMaxChain = 1 << 20;  // a corrupt chain must not loop for ever

bool is_elf64(const Elf64_Ehdr& eh) {
  return std::equal(eh.e_ident, eh.e_ident + SELFMAG, ELFMAG) &&
         eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr) &&
         eh.e_phnum <= kMaxPhdrs;
}

bool read_phdrs(const RemoteMem& mem, std::uintptr_t base, const Elf64_Ehdr& eh,
                std::vector<Elf64_Phdr>* out) {
  out->resize(eh.e_phnum);
  return mem.read(base + eh.e_phoff, out->data(), out->size() * sizeof(Elf64_Phdr));
}

// glibc relocates the d_ptr entries of a loaded object's .dynamic in place (elf/get-
// dynamic-info.h); other loaders (musl) leave them as file addresses. A value below the
// bias is a file address.
std::uintptr_t dyn_addr(std::uint64_t v, std::uintptr_t bias) { return v < bias ? bias + v : v; }

std::uint32_t gnu_hash(std::string_view s) {
  std::uint32_t h = 5381;
  for (const char c : s) h = h * 33 + static_cast<unsigned char>(c);
  return h;
}

std::uint32_t sysv_hash(std::string_view s) {
  std::uint32_t h = 0;
  for (const char c : s) {
    h = (h << 4) + static_cast<unsigned char>(c);
    const std::uint32_t g = h & 0xf0000000U;
    h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

struct DynTables {
  std::uintptr_t symtab = 0, strtab = 0, gnu_hash = 0, hash = 0, versym = 0;
  std::size_t strsz = 0;
};

bool read_dynamic(const RemoteMem& mem, const LoadedObject& obj, DynTables* t) {
  Elf64_Ehdr eh;
  std::vector<Elf64_Phdr> ph;
  if (!mem.read_value(obj.base, &eh) || !is_elf64(eh) || !read_phdrs(mem, obj.base, eh, &ph))
    return false;
  const auto dyn = std::find_if(ph.begin(), ph.end(),
                                [](const Elf64_Phdr& p) { return p.p_type == PT_DYNAMIC; });
  if (dyn == ph.end()) return false;
  for (int i = 0; i < kMaxDynamic; ++i) {
    Elf64_Dyn d;
    if (!mem.read_value(obj.bias + dyn->p_vaddr + i * sizeof(Elf64_Dyn), &d)) return false;
    if (d.d_tag == DT_NULL) break;
    const std::uintptr_t a = dyn_addr(d.d_un.d_ptr, obj.bias);
    switch (d.d_tag) {
      case DT_SYMTAB:
        t->symtab = a;
        break;
      case DT_STRTAB:
        t->strtab = a;
        break;
      case DT_GNU_HASH:
        t->gnu_hash = a;
        break;
      case DT_HASH:
        t->hash = a;
        break;
      case DT_VERSYM:
        t->versym = a;
        break;
      case DT_STRSZ:
        t->strsz = d.d_un.d_val;
        break;
      default:
        break;
    }
  }
  return t->symtab != 0 && t->strtab != 0 && (t->gnu_hash != 0 || t->hash != 0);
}

// 0: no match; 1: a match hidden from default lookup (an old version); 2: a default one.
int match_symbol(const RemoteMem& mem, const DynTables& t, std::uint32_t index,
                 std::string_view name, std::uintptr_t bias, std::uintptr_t* addr) {
  Elf64_Sym sym;
  if (!mem.read_value(t.symtab + index * sizeof(Elf64_Sym), &sym)) return 0;
  if (sym.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym.st_info) != STT_FUNC) return 0;
  if (t.strsz != 0 && sym.st_name + name.size() >= t.strsz) return 0;
  std::string buf(name.size() + 1, '\0');
  if (!mem.read(t.strtab + sym.st_name, buf.data(), buf.size())) return 0;
  if (std::string_view(buf.data(), name.size()) != name || buf.back() != '\0') return 0;
  *addr = bias + sym.st_value;
  std::uint16_t ver = 0;
  if (t.versym != 0 && mem.read_value(t.versym + index * sizeof ver, &ver) && (ver & 0x8000))
    return 1;
  return 2;
}

std::optional<std::uintptr_t> lookup_gnu(const RemoteMem& mem, const DynTables& t,
                                         std::string_view name, std::uintptr_t bias) {
  std::uint32_t hdr[4];  // nbuckets, symoffset, bloom words, bloom shift
  if (!mem.read(t.gnu_hash, hdr, sizeof hdr) || hdr[0] == 0) return std::nullopt;
  const std::uint32_t h = gnu_hash(name);
  const std::uintptr_t buckets = t.gnu_hash + sizeof hdr + std::uintptr_t{hdr[2]} * 8;
  const std::uintptr_t chains = buckets + std::uintptr_t{hdr[0]} * 4;
  std::uint32_t idx = 0;
  if (!mem.read_value(buckets + (h % hdr[0]) * 4, &idx) || idx < hdr[1]) return std::nullopt;
  std::optional<std::uintptr_t> hidden;
  for (int n = 0; n < kMaxChain; ++n, ++idx) {
    std::uint32_t ch = 0;
    if (!mem.read_value(chains + std::uintptr_t{idx - hdr[1]} * 4, &ch)) break;
    std::uintptr_t a = 0;
    if ((ch | 1U) == (h | 1U)) {
      const int m = match_symbol(mem, t, idx, name, bias, &a);
      if (m == 2) return a;
      if (m == 1) hidden = a;
    }
    if (ch & 1U) break;
  }
  return hidden;
}

std::optional<std::uintptr_t> lookup_sysv(const RemoteMem& mem, const DynTables& t,
                                          std::string_view name, std::uintptr_t bias) {
  std::uint32_t hdr[2];  // nbucket, nchain
  if (!mem.read(t.hash, hdr, sizeof hdr) || hdr[0] == 0) return std::nullopt;
  std::uint32_t idx = 0;
  if (!mem.read_value(t.hash + 8 + (sysv_hash(name) % hdr[0]) * 4, &idx)) return std::nullopt;
  std::optional<std::uintptr_t> hidden;
  for (int n = 0; n < kMaxChain && idx != STN_UNDEF && idx < hdr[1]; ++n) {
    std::uintptr_t a = 0;
    const int m = match_symbol(mem, t, idx, name, bias, &a);
    if (m == 2) return a;
    if (m == 1) hidden = a;
    if (!mem.read_value(t.hash + 8 + (std::uintptr_t{hdr[0]} + idx) * 4, &idx)) break;
  }
  return hidden;
}

}  // namespace

RemoteMem RemoteMem::open(const std::string& proc_dir, bool writable) {
  RemoteMem m;
  m.fd_ = ::open((proc_dir + "/mem").c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  return m;
}

RemoteMem& RemoteMem::operator=(RemoteMem&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

RemoteMem::~RemoteMem() {
  if (fd_ >= 0) ::close(fd_);
}

bool RemoteMem::read(std::uintptr_t addr, void* out, std::size_t n) const {
  const ssize_t r = ::pread(fd_, out, n, static_cast<off_t>(addr));
  if (r == static_cast<ssize_t>(n)) return true;
  if (r >= 0) errno = EIO;
  return false;
}

bool RemoteMem::write(std::uintptr_t addr, const void* in, std::size_t n) const {
  const ssize_t r = ::pwrite(fd_, in, n, static_cast<off_t>(addr));
  if (r == static_cast<ssize_t>(n)) return true;
  if (r >= 0) errno = EIO;
  return false;
}

ExeKind classify_exe(pid_t pid, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/exe";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ENOENT ? "it has no executable (a kernel thread?)" : "cannot open " + path;
    return ExeKind::unreadable;
  }
  Elf64_Ehdr eh{};
  std::vector<Elf64_Phdr> ph;
  const bool header = ::pread(fd, &eh, sizeof eh, 0) == static_cast<ssize_t>(sizeof eh);
  const bool elf = header && std::equal(eh.e_ident, eh.e_ident + SELFMAG, ELFMAG);
  if (elf && is_elf64(eh) && eh.e_machine == EM_X86_64) {
    ph.resize(eh.e_phnum);
    const auto bytes = static_cast<ssize_t>(ph.size() * sizeof(Elf64_Phdr));
    if (::pread(fd, ph.data(), ph.size() * sizeof(Elf64_Phdr), static_cast<off_t>(eh.e_phoff)) !=
        bytes)
      ph.clear();
  }
  ::close(fd);
  if (!elf) return *why = "its executable is not an ELF file", ExeKind::not_elf;
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64)
    return *why = "it is not an x86-64 program", ExeKind::not_x86_64;
  const bool interp =
      std::any_of(ph.begin(), ph.end(), [](const Elf64_Phdr& p) { return p.p_type == PT_INTERP; });
  if (!interp)
    return *why =
               "it is statically linked (no PT_INTERP): no dynamic loader to load a "
               "library with",
           ExeKind::static_program;
  return ExeKind::dynamic_program;
}

std::string_view object_basename(std::string_view path) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.ends_with(kDeleted)) path.remove_suffix(kDeleted.size());
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::vector<LoadedObject> loaded_objects(const RemoteMem& mem, const std::vector<Mapping>& maps) {
  std::map<std::string, LoadedObject> by_path;
  std::vector<std::string> order;
  for (const Mapping& m : maps) {
    if (m.path.empty() || m.path.front() != '/' || m.inode == 0) continue;
    auto [it, fresh] = by_path.try_emplace(m.path);
    if (fresh) order.push_back(m.path);
    it->second.path = m.path;
    it->second.maps.push_back(m);
    if (m.offset == 0 && it->second.base == 0) it->second.base = m.start;
  }
  std::vector<LoadedObject> out;
  for (const std::string& p : order) {
    LoadedObject& o = by_path[p];
    Elf64_Ehdr eh;
    std::vector<Elf64_Phdr> ph;
    if (o.base == 0 || !mem.read_value(o.base, &eh) || !is_elf64(eh) ||
        !read_phdrs(mem, o.base, eh, &ph))
      continue;
    const auto load =
        std::find_if(ph.begin(), ph.end(), [](const Elf64_Phdr& x) { return x.p_type == PT_LOAD; });
    if (load == ph.end()) continue;
    o.bias = o.base - (load->p_vaddr & ~(kPage - 1));
    out.push_back(std::move(o));
  }
  return out;
}

std::optional<std::uintptr_t> find_dynamic_symbol(const RemoteMem& mem, const LoadedObject& obj,
                                                  std::string_view name) {
  DynTables t;
  if (!read_dynamic(mem, obj, &t)) return std::nullopt;
  if (t.gnu_hash != 0) return lookup_gnu(mem, t, name, obj.bias);
  return lookup_sysv(mem, t, name, obj.bias);
}

std::optional<CodeCave> find_code_cave(const RemoteMem& mem,
                                       const std::vector<LoadedObject>& objects,
                                       std::span<const std::uint8_t> blob) {
  for (const LoadedObject& o : objects) {
    Elf64_Ehdr eh;
    std::vector<Elf64_Phdr> ph;
    if (!mem.read_value(o.base, &eh) || !read_phdrs(mem, o.base, eh, &ph)) continue;
    for (const Elf64_Phdr& p : ph) {
      if (p.p_type != PT_LOAD || (p.p_flags & PF_X) == 0) continue;
      // Past the segment's memory image and 16-byte aligned, up to the end of its page.
      const std::uintptr_t seg_end = o.bias + p.p_vaddr + std::max(p.p_filesz, p.p_memsz);
      const std::uintptr_t start = (seg_end + 15) & ~std::uintptr_t{15};
      const std::uintptr_t page_end = (seg_end + kPage - 1) & ~(kPage - 1);
      if (page_end <= start || page_end - start < blob.size()) continue;
      // The bytes must be mapped executable by this object's own mapping.
      const auto m = std::find_if(o.maps.begin(), o.maps.end(), [&](const Mapping& x) {
        return x.exec && start >= x.start && start + blob.size() <= x.end;
      });
      if (m == o.maps.end()) continue;
      std::vector<std::uint8_t> now(blob.size());
      if (!mem.read(start, now.data(), now.size())) continue;
      CodeCave c{start, page_end - start, o.path, false};
      c.holds_blob = std::equal(now.begin(), now.end(), blob.begin());
      if (c.holds_blob || std::all_of(now.begin(), now.end(), [](auto b) { return b == 0; }))
        return c;
    }
  }
  return std::nullopt;
}

}  // namespace crossmod::harness::attach
