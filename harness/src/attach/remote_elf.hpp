// Another process's memory and the ELF objects mapped in it, for live attach: reads and
// writes through /proc/PID/mem, dynamic-symbol lookup in a loaded object from its own
// mapped tables, the kind of program /proc/PID/exe is, and the unused tail of an
// executable segment where the injector's code can live.
// Thread safety: RemoteMem is a file descriptor (usable from any thread); the functions
// are reentrant; everything allocates and blocks (not for signal handlers).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attach/proc.hpp"

namespace crossmod::harness::attach {

// /proc/<path>/mem. Reading needs ptrace access to the process; writing read-only pages
// (code) relies on the kernel's FOLL_FORCE, which Linux 6.12+ can restrict to the task's
// active tracer (boot option proc_mem.force_override=ptrace): open the file of the thread
// being traced ("/proc/PID/task/TID") to write code.
class RemoteMem {
 public:
  RemoteMem() = default;
  // errno is set when the result is not valid().
  static RemoteMem open(const std::string& proc_dir, bool writable);
  RemoteMem(RemoteMem&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RemoteMem& operator=(RemoteMem&& o) noexcept;
  RemoteMem(const RemoteMem&) = delete;
  RemoteMem& operator=(const RemoteMem&) = delete;
  ~RemoteMem();

  bool valid() const { return fd_ >= 0; }
  // Whole transfers only; false with errno set otherwise (EIO: not mapped).
  bool read(std::uintptr_t addr, void* out, std::size_t n) const;
  bool write(std::uintptr_t addr, const void* in, std::size_t n) const;
  template <typename T>
  bool read_value(std::uintptr_t addr, T* v) const {
    return read(addr, v, sizeof(T));
  }

 private:
  int fd_ = -1;
};

enum class ExeKind { unreadable, not_elf, not_x86_64, static_program, dynamic_program };
// Reads the ELF header and program headers of /proc/PID/exe (the file the kernel ran,
// whatever mount namespace it is in). *why gets a short reason for every kind but
// dynamic_program.
ExeKind classify_exe(pid_t pid, std::string* why);

// An ELF object as it is mapped: all its file mappings and its load bias.
struct LoadedObject {
  std::string path;
  std::uintptr_t base = 0;  // start of the mapping of file offset 0 (the ELF header)
  std::uintptr_t bias = 0;  // base minus the first PT_LOAD's page-aligned p_vaddr
  std::vector<Mapping> maps;
};
// Groups file mappings by path; only objects whose offset-0 mapping holds an ELF header.
std::vector<LoadedObject> loaded_objects(const RemoteMem& mem, const std::vector<Mapping>& maps);
// The basename of a path with " (deleted)" removed.
std::string_view object_basename(std::string_view path);

// Address of the defined function `name` in obj's dynamic symbol table, looked up the way
// the dynamic linker does (DT_GNU_HASH, else DT_HASH) in the object's own mapped tables:
// no file is opened, so a target in another mount namespace or a deleted file work. An
// IFUNC is refused (its value is the resolver, not the function). nullopt: not found.
std::optional<std::uintptr_t> find_dynamic_symbol(const RemoteMem& mem, const LoadedObject& obj,
                                                  std::string_view name);

// Executable bytes nobody runs: the zero tail of an executable PT_LOAD segment's last
// page, past p_filesz. With separate-code layouts (GNU ld's default on x86-64 since
// binutils 2.31) the file pads the segment to a page with zeros, and the kernel maps that
// padding executable; no code, symbol or unwind entry points into it.
struct CodeCave {
  std::uintptr_t addr = 0;
  std::size_t size = 0;  // bytes available from addr
  std::string object;
  bool holds_blob = false;  // already holds exactly the blob (an earlier injection)
};
// The first cave (in `objects` order) that already holds `blob` or whose first
// blob.size() bytes are all zero; nullopt when none fits.
std::optional<CodeCave> find_code_cave(const RemoteMem& mem,
                                       const std::vector<LoadedObject>& objects,
                                       std::span<const std::uint8_t> blob);

}  // namespace crossmod::harness::attach
