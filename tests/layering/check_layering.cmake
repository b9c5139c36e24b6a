# Run by the `layering` ctest entry: the allowed probe must build (so the view and the probe are
# sound) and the forbidden one must fail because the compiler cannot find FORBIDDEN_HEADER, a header
# that exists in src/ but lies outside the kernels module's view.
if(NOT EXISTS ${SOURCE_DIR}/src/${FORBIDDEN_HEADER})
  message(FATAL_ERROR "the probe includes ${FORBIDDEN_HEADER}, which is not in src/: pick a header "
                      "that exists, or the failure would prove nothing")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --target layering_probe_allowed
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the allowed probe does not build, so the forbidden one proves nothing:\n${out}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --target layering_probe_forbidden
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "kernels built an include of ${FORBIDDEN_HEADER}: the layering is not enforced")
endif()
string(REPLACE "." "\\." header_re ${FORBIDDEN_HEADER})
# g++: "fatal error: experts/x.h: No such file or directory"; clang: "fatal error: 'experts/x.h' file
# not found".
if(NOT out MATCHES "fatal error: '?${header_re}'?:? (No such file or directory|file not found)")
  message(FATAL_ERROR "the forbidden probe failed, but not because ${FORBIDDEN_HEADER} was not "
                      "found:\n${out}")
endif()
message(STATUS "kernels cannot include ${FORBIDDEN_HEADER}, and builds its allowed includes")
