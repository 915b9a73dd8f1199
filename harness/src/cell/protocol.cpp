// The protocol registry (see protocol.hpp): the table, and one SiteProtocol per entry.
// Thread safety: the table is immutable; a SiteProtocol is used by one thread.
#include "cell/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "cell/cell.hpp"
#include "crossmod/callpatch.hpp"
#include "crossmod/wordpatch.hpp"
#include "crossmod/x86.hpp"
#include "cell/site.hpp"

namespace crossmod::harness {

namespace {

// Report order: calibrate lists its controls in this order (and the tmax TOML with it).
constexpr ProtocolInfo kProtocols[] = {
    // id                    name              role                   hidden runs   1line waits
    {Protocol::wordpatch,      "wordpatch",      ControlRole::none,     false, true,  false, 2},
    {Protocol::naive,          "naive",          ControlRole::positive, false, true,  false, 1},
    {Protocol::aligned,        "aligned",        ControlRole::negative, false, true,  true,  0},
    {Protocol::callpatch,      "callpatch",      ControlRole::negative, false, true,  false, 0},
    {Protocol::sync_core,      "sync-core",      ControlRole::negative, false, true,  false, 0},
    {Protocol::selftest_hang,  "selftest-hang",  ControlRole::none,     true,  false, false, 0},
    {Protocol::selftest_crash, "selftest-crash", ControlRole::none,     true,  false, false, 0},
    {Protocol::selftest_torn,  "selftest-torn",  ControlRole::none,     true,  true,  false, 0},
};

// ---- the site protocols ------------------------------------------------------------------

// The site's two states, copied into the patcher's own object so the patch window reads
// no line an executor touches.
class TwoStates : public SiteProtocol {
 protected:
  void take(testsupport::StressSite& site) {
    site_ = site.site();
    a_ = site.state_a();
    b_ = site.state_b();
  }
  std::span<const std::uint8_t> next(bool to_b) const { return to_b ? std::span(b_) : std::span(a_); }
  std::uint8_t* site_ = nullptr;
  std::array<std::uint8_t, 5> a_{}, b_{};
};

// wordpatch, sync-core and aligned: the engine's WordPatcher with the protocol's policy.
class WordPatchProtocol final : public TwoStates {
 public:
  WordPatchProtocol(WaitPolicy wait, InlineStore store) : wait_(wait), store_(store) {}
  std::string prepare(testsupport::StressSite& site) override {
    take(site);
    wp_.emplace(wait_, store_);
    if (wp_->init_status() != Status::ok) {
      return fmt::format("WordPatcher init: {}", to_string(wp_->init_status()));
    }
    return {};
  }
  Status patch(bool to_b) override { return wp_->patch(site_, next(to_b)); }
  const char* in_line_store() const override { return store_ == InlineStore::locked ? "locked" : "plain"; }

 private:
  WaitPolicy wait_;
  InlineStore store_;
  std::optional<WordPatcher> wp_;
};

// naive: front then back, with W between them and no int3 (the positive control).
class NaiveProtocol final : public TwoStates {
 public:
  explicit NaiveProtocol(std::uint64_t w) : wait_(WaitPolicy::Ticks(w)) {}
  std::string prepare(testsupport::StressSite& site) override {
    take(site);
    return {};
  }
  Status patch(bool to_b) override { return naive_split_write(site_, next(to_b), wait_); }

 private:
  WaitPolicy wait_;
};

// callpatch: the engine's CallSite, deactivate to B and activate back to A.
class CallPatchProtocol final : public SiteProtocol {
 public:
  std::string prepare(testsupport::StressSite& site) override {
    const Status st = CallSite::prepare(site.site(), site.call_target(), &cs_);
    if (st != Status::ok) return fmt::format("CallSite::prepare: {}", to_string(st));
    return {};
  }
  Status patch(bool to_b) override { return to_b ? cs_.deactivate() : cs_.activate(); }

 private:
  CallSite cs_;
};

// selftest-torn: deliberately torn, through the engine's in-line stores. Even toggles
// leave "A front + B back" (a call into the PROT_NONE window: SIGSEGV), odd toggles
// "B front + A back" (#UD: SIGILL). restore() puts A back after the dwell.
class TornProtocol final : public TwoStates {
 public:
  explicit TornProtocol(unsigned straddle) : split_(straddle ? straddle : 1) {}  // S = 0 tears at byte 1
  std::string prepare(testsupport::StressSite& site) override {
    take(site);
    return {};
  }
  Status patch(bool to_b) override { return write_half(to_b, b_); }
  Status restore(bool to_b) override { return write_half(to_b, a_); }

 private:
  Status write_half(bool back, const std::array<std::uint8_t, 5>& bytes) {
    const unsigned k = split_;
    return back ? x86::store_locked(site_ + k, std::span(bytes).subspan(k))
                : x86::store_locked(site_, std::span(bytes).first(k));
  }
  unsigned split_;
};

// selftest-hang and selftest-crash: the child never reaches the site.
class HangProtocol final : public SiteProtocol {
 public:
  [[noreturn]] void enter(PhaseFn phase, void* ctx) override {
    phase(ctx, "selftest-hang: spinning forever");
    for (;;) x86::pause();
  }
  std::string prepare(testsupport::StressSite&) override { return "selftest-hang: unreachable"; }
  Status patch(bool) override { return Status::unsupported; }
};

class CrashProtocol final : public SiteProtocol {
 public:
  [[noreturn]] void enter(PhaseFn phase, void* ctx) override {
    phase(ctx, "selftest-crash: abort()");
    std::abort();
  }
  std::string prepare(testsupport::StressSite&) override { return "selftest-crash: unreachable"; }
  Status patch(bool) override { return Status::unsupported; }
};

}  // namespace

std::span<const ProtocolInfo> all_protocols() { return kProtocols; }

const ProtocolInfo& info(Protocol p) {
  for (const ProtocolInfo& i : kProtocols)
    if (i.id == p) return i;
  throw std::logic_error("protocol missing from the registry");
}

const char* to_string(Protocol p) {
  for (const ProtocolInfo& i : kProtocols)
    if (i.id == p) return i.name;
  return "?";
}

std::optional<Protocol> try_parse_protocol(std::string_view name) {
  std::string n(name);
  std::replace(n.begin(), n.end(), '_', '-');
  for (const ProtocolInfo& i : kProtocols)
    if (n == i.name) return i.id;
  return std::nullopt;
}

Protocol parse_protocol(std::string_view name) {
  if (auto p = try_parse_protocol(name)) return *p;
  throw std::invalid_argument(fmt::format("unknown protocol '{}' (known: {})", name, protocol_names()));
}

std::string protocol_names() {
  std::string s;
  for (const ProtocolInfo& i : kProtocols) {
    if (i.hidden) continue;
    if (!s.empty()) s += ", ";
    s += i.name;
  }
  return s;
}

std::unique_ptr<SiteProtocol> make_site_protocol(const CellSpec& spec) {
  switch (spec.protocol) {
    case Protocol::wordpatch:
      return std::make_unique<WordPatchProtocol>(WaitPolicy::Ticks(spec.wait_ticks), InlineStore::locked);
    case Protocol::sync_core:
      return std::make_unique<WordPatchProtocol>(WaitPolicy::SyncCore(), InlineStore::locked);
    case Protocol::aligned:
      // The engine's own in-line write (LOCK CMPXCHG), documented atomic for any window in a
      // line: a negative control may only check what is documented. Until 2026-11-24 this was
      // a plain MOV, which AMD documents only inside an aligned quadword; at site_offset 29
      // (bytes 29..33, across the quadword boundary at 32) it tore once in 1.69M exposed
      // toggles (results/amd-fam25-mod17-step1-1pkg/calibrate-20261124T133934Z.json).
      return std::make_unique<WordPatchProtocol>(WaitPolicy::None(), InlineStore::locked);
    case Protocol::naive: return std::make_unique<NaiveProtocol>(spec.wait_ticks);
    case Protocol::callpatch: return std::make_unique<CallPatchProtocol>();
    case Protocol::selftest_hang: return std::make_unique<HangProtocol>();
    case Protocol::selftest_crash: return std::make_unique<CrashProtocol>();
    case Protocol::selftest_torn: return std::make_unique<TornProtocol>(spec.straddle);
  }
  throw std::logic_error("protocol missing from make_site_protocol");
}

}  // namespace crossmod::harness
