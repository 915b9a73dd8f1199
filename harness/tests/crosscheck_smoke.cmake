# Smoke tests of `crossmod crosscheck` on the real binary with tiny counts (label smoke):
# files and schema, interleaving, --for, bad input. Checks live in crosscheck_smoke.py.
set(CROSSMOD_CROSSCHECK_SMOKE ${CMAKE_CURRENT_LIST_DIR}/crosscheck_smoke.py)
foreach(t run duration bad_input)
  add_test(NAME crosscheck_smoke_${t}
           COMMAND ${CROSSMOD_PYTHON} ${CROSSMOD_CROSSCHECK_SMOKE} $<TARGET_FILE:crossmod> ${t})
  set_tests_properties(crosscheck_smoke_${t} PROPERTIES LABELS smoke TIMEOUT 600 RUN_SERIAL TRUE)
endforeach()
