# Live attach (src/attach, issue 41): a multithreaded test target, a library whose entry
# writes a marker, a statically linked target for the refusal (where libc.a exists), the
# by-hand tool, and the tests that inject into those targets (label smoke: they start
# processes and take seconds).
add_executable(attach_target ${CMAKE_CURRENT_SOURCE_DIR}/tests/attach_target.cpp)
target_link_libraries(attach_target PRIVATE crossmod_warnings Threads::Threads)
add_library(attach_marker_lib SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tests/attach_marker_lib.cpp)
target_link_libraries(attach_marker_lib PRIVATE crossmod_warnings)

include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_LINK_OPTIONS -static)
check_c_source_compiles("int main(void) { return 0; }" CROSSMOD_HAVE_STATIC_LIBC)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(CROSSMOD_HAVE_STATIC_LIBC)
  add_executable(attach_static_target ${CMAKE_CURRENT_SOURCE_DIR}/tests/attach_static_target.c)
  target_link_options(attach_static_target PRIVATE -static)
  set(CROSSMOD_ATTACH_STATIC "$<TARGET_FILE:attach_static_target>")
else()
  set(CROSSMOD_ATTACH_STATIC "")
endif()

add_executable(attach_tool ${CMAKE_CURRENT_SOURCE_DIR}/tests/attach_tool.cpp)
target_link_libraries(attach_tool PRIVATE crossmod_harness crossmod_warnings)

add_executable(attach_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests/attach_smoke.cpp)
target_link_libraries(attach_tests PRIVATE crossmod_harness crossmod_warnings GTest::gtest
                      GTest::gtest_main)
target_compile_definitions(attach_tests PRIVATE
  ATTACH_TARGET="$<TARGET_FILE:attach_target>"
  ATTACH_MARKER_LIB="$<TARGET_FILE:attach_marker_lib>"
  ATTACH_TOOL="$<TARGET_FILE:attach_tool>"
  ATTACH_STATIC_TARGET="${CROSSMOD_ATTACH_STATIC}")
if(CROSSMOD_HAVE_STATIC_LIBC)
  add_dependencies(attach_tests attach_static_target)
endif()
add_dependencies(attach_tests attach_target attach_marker_lib attach_tool)
gtest_discover_tests(attach_tests PROPERTIES LABELS smoke TIMEOUT 120 DISCOVERY_TIMEOUT 60)
