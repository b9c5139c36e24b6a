# Helpers that turn each folder under src/ into a library with its tests, so that adding a file
# never needs a CMake edit: `*_test.cc` files are tests, `*_avx2.cc` / `*_avx512.cc` get their ISA
# flags (the variant is chosen at run time, so nothing else may depend on -march), the rest is the
# library. They also enforce the layering: a target sees only the modules it may use.

set(DELTAFIN_WARNINGS -Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND DELTAFIN_WARNINGS -Wshadow=local)
endif()
set(DELTAFIN_AVX2_FLAGS -mavx2 -mfma -mf16c -mbmi2)
set(DELTAFIN_AVX512_FLAGS -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl -mavx512dq)

# Extra compile options for the unit-test programs' own sources; the release and fuzz presets set
# -O0. Test files are heavy on gtest and light on work, and compile ~2x faster unoptimized; the
# code they test is in the libraries, which keep their build type. No ISA flags reach test files
# (no -mfma), so their floating point is the same at any level. (-O1 is no cheaper way out: GCC
# 12's -Warray-bounds misfires on std::string there.)
set(DELTAFIN_TEST_COMPILE_OPTIONS "" CACHE STRING "Compile options for the unit tests' sources")

# A unit-test program: the tests' compile options and warnings, one ctest entry NAME labelled
# `unit`, and a place in deltafin_unit_tests (what the sanitizer tree builds).
function(deltafin_unit_test target name)
  target_compile_options(${target} PRIVATE ${DELTAFIN_TEST_COMPILE_OPTIONS})
  deltafin_warnings(${target})
  add_test(NAME ${name} COMMAND ${target})
  set_tests_properties(${name} PROPERTIES LABELS unit)
  set_property(GLOBAL APPEND PROPERTY DELTAFIN_UNIT_TEST_TARGETS ${target})
endfunction()

function(deltafin_warnings target)
  target_compile_options(${target} PRIVATE ${DELTAFIN_WARNINGS})
  if(DELTAFIN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

function(deltafin_isa_flags)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "_avx512\\.cc$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${DELTAFIN_AVX512_FLAGS}")
    elseif(src MATCHES "_avx2\\.cc$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${DELTAFIN_AVX2_FLAGS}")
    endif()
  endforeach()
endfunction()

# The layering. Every module includes as "<module>/file.h", so a target's include path is one folder
# in the build tree, layering/<view>/, holding a link per module it may see (and `deltafin` for the
# public API): a header of any other module is simply not found. A module sees itself and what its
# DEPS export: an ordinary module exports itself plus its own exports (headers include their deps'
# headers, so the view is the transitive closure); the module that implements include/deltafin/
# (API) exports the public API alone, so its users never see tensors.

# The modules `deps` export, in `out_var`. Each must already be defined: modules are added in
# dependency order (src/CMakeLists.txt).
function(deltafin_exports_of out_var)
  set(seen)
  foreach(dep IN LISTS ARGN)
    if(NOT TARGET deltafin_${dep})
      message(FATAL_ERROR "deltafin: module '${dep}' is used before it is defined "
                          "(add modules in dependency order in src/CMakeLists.txt)")
    endif()
    get_target_property(exports deltafin_${dep} DELTAFIN_EXPORTS)
    list(APPEND seen ${exports})
  endforeach()
  list(REMOVE_DUPLICATES seen)
  set(${out_var} ${seen} PARENT_SCOPE)
endfunction()

# Gives `target` the include view `view`: one link per entry of `visible` (a module name, or `api`
# for include/deltafin/). The folder is rebuilt at each configure so a dropped dependency disappears.
function(deltafin_include_view target view)
  set(dir ${PROJECT_BINARY_DIR}/layering/${view})
  file(REMOVE_RECURSE ${dir})  # removes the links, never what they point to
  file(MAKE_DIRECTORY ${dir})
  set(visible ${ARGN})
  list(REMOVE_DUPLICATES visible)
  foreach(module IN LISTS visible)
    if(module STREQUAL "api")
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/deltafin ${dir}/deltafin SYMBOLIC)
    elseif(module STREQUAL "testing")
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/tests/support ${dir}/testing SYMBOLIC)
    else()
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${module} ${dir}/${module} SYMBOLIC)
    endif()
  endforeach()
  target_include_directories(${target} PRIVATE ${dir})
endfunction()

# deltafin_uses(TARGET VIEW DEPS dep...): a target outside src/ (the command, a layering probe)
# that links `deps` and sees only what they export. The harnesses (bench/, fuzz/) pass every module
# (the global property DELTAFIN_MODULES).
function(deltafin_uses target view)
  cmake_parse_arguments(U "" "" "DEPS" ${ARGN})
  deltafin_exports_of(visible ${U_DEPS})
  deltafin_include_view(${target} ${view} ${visible})
  foreach(dep IN LISTS U_DEPS)
    target_link_libraries(${target} PRIVATE deltafin_${dep})
  endforeach()
endfunction()

# deltafin_module(NAME [API] [DEPS dep...] [TEST_DEPS dep...] [PUBLIC_LIBS lib...])
# Library target: deltafin_<NAME>; test binary: deltafin_<NAME>_tests (one ctest entry). DEPS are
# the modules it may use (DESIGN.md's arrows); TEST_DEPS are extra modules its tests may use. API:
# the module implements include/deltafin/ and its users see only that.
function(deltafin_module name)
  cmake_parse_arguments(M "API" "" "DEPS;TEST_DEPS;PUBLIC_LIBS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc ${CMAKE_CURRENT_SOURCE_DIR}/*/*.cc)
  set(lib_srcs)
  set(test_srcs)
  foreach(src IN LISTS srcs)
    if(src MATCHES "_test\\.cc$")
      list(APPEND test_srcs ${src})
    else()
      list(APPEND lib_srcs ${src})
    endif()
  endforeach()
  deltafin_isa_flags(${lib_srcs} ${test_srcs})
  set(target deltafin_${name})
  add_library(${target} STATIC ${lib_srcs})
  set_property(GLOBAL APPEND PROPERTY DELTAFIN_MODULES ${name})
  deltafin_exports_of(visible ${M_DEPS})
  list(PREPEND visible ${name})
  if(M_API)
    list(APPEND visible api)
    set_target_properties(${target} PROPERTIES DELTAFIN_EXPORTS api)
  else()
    set_target_properties(${target} PROPERTIES DELTAFIN_EXPORTS "${visible}")
  endif()
  deltafin_include_view(${target} ${name} ${visible})
  foreach(dep IN LISTS M_DEPS)
    target_link_libraries(${target} PUBLIC deltafin_${dep})
  endforeach()
  target_link_libraries(${target} PUBLIC ${M_PUBLIC_LIBS} Threads::Threads)
  deltafin_warnings(${target})
  if(DELTAFIN_TESTS AND test_srcs)
    add_executable(${target}_tests ${test_srcs})
    deltafin_exports_of(test_visible ${M_TEST_DEPS})
    # Tests also see tests/support/ as "testing/": helpers that build test models and files.
    deltafin_include_view(${target}_tests ${name}_tests ${visible} ${test_visible} testing)
    target_link_libraries(${target}_tests PRIVATE ${target} GTest::gtest GTest::gtest_main)
    foreach(dep IN LISTS M_TEST_DEPS)
      target_link_libraries(${target}_tests PRIVATE deltafin_${dep})
    endforeach()
    target_compile_definitions(${target}_tests PRIVATE
      DELTAFIN_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DELTAFIN_BINARY_DIR="${PROJECT_BINARY_DIR}")
    # Every test file includes gtest, ~1.5 s of parsing each: parsed once per test program.
    target_precompile_headers(${target}_tests PRIVATE <gtest/gtest.h>)
    deltafin_unit_test(${target}_tests ${name})
  endif()
endfunction()
