// The protocol registry: every protocol a cell can run is one entry here (its name, its role
// as a control, whether --help hides it, how many waits of W one toggle spends) plus one
// SiteProtocol implementation that prepares, toggles and restores the stress site.
// Everything else (CLI, presets, CSV, calibrate's controls, the toggle-rate model, the
// child's loop) looks protocols up here instead of naming them.
// Thread safety: the table is immutable. A SiteProtocol belongs to the cell's child and is
// used only by its patcher thread.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "crossmod/status.hpp"

namespace crossmod::testsupport {
class StressSite;
}

namespace crossmod::harness {
struct CellSpec;
}

namespace crossmod::harness {

enum class Protocol {
  wordpatch,   // engine WordPatcher, WaitPolicy::Ticks(wait_ticks)
  naive,       // engine naive_split_write: front then back, no int3 (positive control)
  callpatch,   // engine CallSite activate/deactivate (must never fail)
  aligned,     // site inside one line at site_offset, one locked store (negative control)
  sync_core,   // engine WordPatcher, WaitPolicy::SyncCore()
  // Test-only, hidden from --help: exercise the watchdog and crash classification.
  selftest_hang,    // the child never finishes: must be recorded as `hang`
  selftest_crash,   // the child aborts: must be recorded as `crash`
  selftest_torn,    // the patcher deliberately writes a torn mix and restores it every
                    // toggle (even toggles A front + B back -> SIGSEGV in the PROT_NONE
                    // window, odd toggles B front + A back -> SIGILL): faults are certain
                    // and must be counted
};

// What a protocol's cells prove in calibrate and sweep: a positive control must fail on
// hardware that tears (else the run could not have seen a tear), a negative control must
// never fail (else the detector or the engine is wrong).
enum class ControlRole { none, positive, negative };

struct ProtocolInfo {
  Protocol id;
  const char* name;           // the one spelling: CLI, presets, CSV, TOML
  ControlRole role;
  bool hidden;                // selftest-*: accepted, never listed
  bool runs_site;             // false: the child never reaches the site (hang/crash selftests)
  bool in_one_line;           // the site sits inside one line (S = 0 at site_offset)
  unsigned waits_per_toggle;  // waits of W per toggle (toggle-rate model; 0: W unused)
};

// Every protocol, in report order (the order calibrate lists its controls in).
std::span<const ProtocolInfo> all_protocols();
const ProtocolInfo& info(Protocol p);

const char* to_string(Protocol p);
// Accepts to_string's spelling and the C++ underscore spelling (sync_core).
std::optional<Protocol> try_parse_protocol(std::string_view name);
Protocol parse_protocol(std::string_view name);  // throws std::invalid_argument
// "wordpatch, naive, ..." (visible protocols only), for error messages.
std::string protocol_names();

// How the child's patcher drives one protocol. Calls come in this order, all on the
// patcher thread: enter() first thing in the child; prepare() once the site exists and the
// fault handlers are installed (engine objects are constructed only then, so the engine's
// trap handler chains to ours); then patch()/restore() once per toggle.
class SiteProtocol {
 public:
  using PhaseFn = void (*)(void* ctx, const char* phase);
  virtual ~SiteProtocol() = default;
  // Selftests that never reach the site act here (and never return).
  virtual void enter(PhaseFn, void*) {}
  // Returns a non-empty reason when the engine refused to set up.
  virtual std::string prepare(testsupport::StressSite& site) = 0;
  // The patch window: moves the site to state B (to_b) or back to A. Touches only the
  // site and the engine's own state; the caller keeps its bookkeeping away from it.
  [[nodiscard]] virtual Status patch(bool to_b) = 0;
  // After the dwell; only selftest-torn has something to put back.
  [[nodiscard]] virtual Status restore(bool /*to_b*/) { return Status::ok; }
  // The WordPatcher protocols: their in-line store, "locked" or "plain" (the two write the
  // same bytes, so no cell can tell them apart); nullptr for the others.
  [[nodiscard]] virtual const char* in_line_store() const { return nullptr; }
};

std::unique_ptr<SiteProtocol> make_site_protocol(const CellSpec& spec);

}  // namespace crossmod::harness
