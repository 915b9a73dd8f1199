# Smoke tests of `crossmod sweep` and `crossmod calibrate` on the real binary with tiny
# counts (label smoke), and one opt-in stress test (label stress). The checks live in
# sweep_smoke.py, which validates the files against the results schema.
set(CROSSMOD_SWEEP_SMOKE ${CMAKE_CURRENT_LIST_DIR}/sweep_smoke.py)
foreach(t preset hang torn crash bad_input resume sigint calibrate calibrate_resume control_fail
          sigkill_resume soak)
  add_test(NAME sweep_smoke_${t}
           COMMAND ${CROSSMOD_PYTHON} ${CROSSMOD_SWEEP_SMOKE} $<TARGET_FILE:crossmod> ${t})
  set_tests_properties(sweep_smoke_${t} PROPERTIES LABELS smoke TIMEOUT 600 RUN_SERIAL TRUE)
endforeach()
add_test(NAME sweep_stress_naive_tears
         COMMAND ${CROSSMOD_PYTHON} ${CROSSMOD_SWEEP_SMOKE} $<TARGET_FILE:crossmod> stress_naive)
set_tests_properties(sweep_stress_naive_tears PROPERTIES LABELS stress TIMEOUT 1200 RUN_SERIAL TRUE)
