// Loaded ELF objects: their executable segments (made writable on first use, for the
// life of the process), their function symbols from .symtab (or .dynsym), demangled, and
// the contents of named sections. Thread safety: every function must be called with the
// registry mutex held (registry.cpp); they read files and allocate. Never on the probe
// invocation path.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/probes.hpp"

namespace crossmod::probes::detail {

struct Segment {
  std::uintptr_t begin = 0, end = 0;
  WritableRange writable;  // made on first patch in this segment, kept forever
  Status writable_status = Status::ok;
  bool tried = false;
};

struct Symbol {
  std::uintptr_t addr = 0;
  std::uintptr_t size = 0;
  const char* name = nullptr;  // demangled, interned forever
};

struct Object {
  std::string path;         // file opened for symbols ("/proc/self/exe" for the main program)
  const char* display = "";  // interned path for ProbeInfo::object
  std::uintptr_t bias = 0;  // dlpi_addr
  std::vector<Segment> exec;
  std::vector<Symbol> symbols;  // sorted by addr
  bool symbols_loaded = false;
  bool scanned = false;  // providers that scan at load time have visited it
  bool pin_requested = false;  // queued for pin_requested_objects (registry mutex)
  // Seen by the first refresh (the library constructor's scan, at start-up): loaded
  // with the program, never unloaded, never pinned (no dlopen while constructors run).
  bool startup = false;
};

// Re-reads dl_iterate_phdr and adds objects not seen before. Returns the objects list.
std::vector<Object*>& refresh_objects() noexcept;
// The object whose executable segment holds [addr, addr+len), refreshing once if unknown.
// The object found will hold a probe site: it is queued to be pinned (below).
Object* object_for_code(std::uintptr_t addr, std::size_t len, Segment** seg) noexcept;
// Pins every queued object with dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE): a
// later dlclose cannot unmap code that holds probe sites. Call WITHOUT the registry mutex
// (dlopen takes the loader lock, which a thread running an object's constructors holds
// while it may wait for the registry mutex); cheap when nothing is queued. Thread-safe.
void pin_requested_objects() noexcept;
// Makes the segment writable (first call only); the status of that attempt.
Status ensure_writable(Segment* seg) noexcept;
// Symbol containing addr (or starting within `slack` bytes after it when containing fails),
// loading the object's symbol table on first use. nullptr if none.
const Symbol* symbol_for(Object* obj, std::uintptr_t addr) noexcept;
const Symbol* symbol_starting_in(Object* obj, std::uintptr_t begin, std::uintptr_t end) noexcept;
// Runtime addresses of every section called `name` (start, size), from the section headers
// of the object's file.
std::vector<std::pair<std::uintptr_t, std::size_t>> sections_named(const Object& obj,
                                                                    const char* name) noexcept;
// A string that lives for the process.
const char* intern(const std::string& s) noexcept;

}  // namespace crossmod::probes::detail
