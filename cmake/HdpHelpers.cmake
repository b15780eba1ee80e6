# Compiler flags shared by every hdp target, and the helpers that declare libraries and tests.

# Designated initializers that leave defaulted members out are intended (options structs).
set(HDP_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-missing-field-initializers)
if(HDP_WERROR)
  list(APPEND HDP_WARNINGS -Werror)
endif()

if(HDP_SANITIZE)
  string(REPLACE "," ";" _sanitizers "${HDP_SANITIZE}")
  foreach(_s IN LISTS _sanitizers)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${_s}>)
    add_link_options(-fsanitize=${_s})
  endforeach()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>)
  # Executables linked at a fixed address: the instrumented `hdp` as a PIE carried 5.7 million
  # relative relocations, which the loader applied at every start of an agent or a worker
  # (docs/testing.md: `hdp train --help` 0.51-0.60 s as a PIE, 0.29-0.38 s without). The suite's
  # start-up bounds are measured with these processes.
  add_link_options($<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>)
  # The labels of the tests the sanitizer build runs, as a CTest label regex: hdp_test builds only
  # those there, and scripts/test.sh reads the file to select them (`ctest -L`).
  set(HDP_SANITIZER_TEST_LABELS "unit|integration")
  file(WRITE ${CMAKE_BINARY_DIR}/sanitizer-test-labels "${HDP_SANITIZER_TEST_LABELS}\n")
endif()

# hdp_library(NAME <target> SOURCES ... [PUBLIC_LIBS ...] [PRIVATE_LIBS ...])
function(hdp_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SOURCES})
  target_compile_options(${ARG_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${HDP_WARNINGS}>)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_PUBLIC_LIBS} PRIVATE ${ARG_PRIVATE_LIBS})
endfunction()

# hdp_test(NAME <exe> SOURCES ... LIBS ... LABELS unit|integration|gpu|system [TIMEOUT s] [SERIAL])
# Each GoogleTest case becomes one CTest test, so `ctest -j` runs cases in parallel. SERIAL cases
# run alone: multi-process scenarios whose timing bounds would not survive a loaded machine.
# gtest_discover_tests passes each property one value (a list's items become separate words in
# the generated set_tests_properties), so each environment variable goes in a property of its own.
function(hdp_test)
  cmake_parse_arguments(ARG "SERIAL" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  set(_serial FALSE)
  if(ARG_SERIAL)
    set(_serial TRUE)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(${ARG_NAME} PRIVATE ${HDP_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} hdp_test_support GTest::gtest GTest::gmock)
  # The sanitizer build runs the tests of HDP_SANITIZER_TEST_LABELS only (scripts/test.sh): the
  # executable of any other test is declared there, for the lines that name it, but not built.
  if(HDP_SANITIZE AND NOT "${ARG_LABELS}" MATCHES "${HDP_SANITIZER_TEST_LABELS}")
    set_target_properties(${ARG_NAME} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    return()
  endif()
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} RUN_SERIAL ${_serial}
               ENVIRONMENT "HDP_BIN_DIR=${CMAKE_BINARY_DIR}/bin"
               ENVIRONMENT_MODIFICATION "HDP_TEST_CACHE=set:${CMAKE_BINARY_DIR}/test-cache")
endfunction()
