# cmake -DCASE=<dir> -DBINARY=<dir> -DHDP_SOURCE_DIR=<dir> -DEXPECTED=<text> -P expect_failure.cmake
# Configures the project in CASE and passes only when configuring fails with EXPECTED in its
# message (CMake wraps long messages, so whitespace is compared collapsed).
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CASE} -B ${BINARY} -DHDP_SOURCE_DIR=${HDP_SOURCE_DIR}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "[ \t\r\n]+" " " text "${out} ${err}")
if(result EQUAL 0)
  message(FATAL_ERROR "configuring ${CASE} succeeded; the layering check should have refused it:\n${out}${err}")
endif()
string(FIND "${text}" "${EXPECTED}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "configuring ${CASE} failed without the expected message '${EXPECTED}':\n${out}${err}")
endif()
message(STATUS "refused as expected: ${EXPECTED}")
