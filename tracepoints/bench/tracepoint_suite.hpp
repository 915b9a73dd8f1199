// The tracepoint suite of `crossmod bench` (tracepoint_suite.cpp): `tracepoint/invoke`,
// `tracepoint/latency`, `tracepoint/memory`. Registered by the harness's bench runner
// after env() is filled. Thread safety: main (patcher) thread only.
#pragma once

namespace crossmod::bench {
void register_tracepoint_benchmarks();
}  // namespace crossmod::bench
