// Uninstrumented functions for the tracepoint provider tests (tracepoint_workload.cpp).
#pragma once
#include <csetjmp>
#include <cstdint>

extern "C" {
std::uint64_t tpw_work(std::uint64_t x);          // 3x + 1
std::uint64_t tpw_recurse(std::uint64_t n);       // n + (n-1) + ... + 0, n+1 calls
void tpw_jump_down(unsigned n, std::jmp_buf* env);  // n+1 nested calls, then longjmp(env, 1)
std::uint64_t tpw_fake_setjmp(std::uint64_t x);   // x + 2
std::uint64_t tpw_tail_a(std::uint64_t x);        // 2 (x + 1), tail-calls tpw_tail_b
std::uint64_t tpw_tail_b(std::uint64_t x);        // 2x
std::uint64_t tpw_leaf(std::uint64_t x);          // x + 1
std::uint64_t tpw_ipa_caller(std::uint64_t x);    // 2x; r8, xmm2 live across tpw_leaf, rsp unaligned
std::uint64_t tpx_short(std::uint64_t x);         // x + 1 (4 bytes, code right after it)
std::uint64_t tpx_short_next(std::uint64_t x);    // x + 2
std::uint64_t tpx_padded(std::uint64_t x);        // x + 1 (4 bytes, then alignment NOPs)
}
