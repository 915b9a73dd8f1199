# Smoke test of `crossmod bench`: the real binary with --smoke (3 throughput rates,
# 0.05 s windows) and --min-time 0.01, then check_bench_json.py validates the JSON
# context, the benchmark names and counters, the latency CSV and the summary. It never
# asserts a speed. Takes ~10-30 s on 2 cores.
add_test(NAME bench_smoke
  COMMAND ${CROSSMOD_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_bench_json.py
          --run $<TARGET_FILE:crossmod> --min-time 0.01)
set_tests_properties(bench_smoke PROPERTIES LABELS smoke TIMEOUT 180)
