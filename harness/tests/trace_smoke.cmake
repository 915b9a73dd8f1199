# `crossmod trace` on Debian's sqlite3: output and exit status unchanged, table in --out
# (the script is shared with tracepoints' crossmod-trace smoke test; 77 = skipped).
add_test(NAME crossmod_trace_subcommand_sqlite3
  COMMAND ${PROJECT_SOURCE_DIR}/tracepoints/tests/trace_smoke.sh $<TARGET_FILE:crossmod> trace)
set_tests_properties(crossmod_trace_subcommand_sqlite3 PROPERTIES
  LABELS smoke SKIP_RETURN_CODE 77 TIMEOUT 120)
