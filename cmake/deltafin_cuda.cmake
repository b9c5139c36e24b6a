# The optional CUDA backend: decides DELTAFIN_CUDA_ENABLED from -DDELTAFIN_CUDA=AUTO|ON|OFF and
# sets the nvcc flags. Only src/cuda/ is compiled by nvcc, so the CPU targets and their flags
# (sanitizers, libFuzzer) never reach it; with CUDA off the build is exactly the CPU-only one.

set(DELTAFIN_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE DELTAFIN_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${DELTAFIN_CUDA}" _deltafin_cuda)
if(NOT _deltafin_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DELTAFIN_CUDA is '${DELTAFIN_CUDA}'; expected AUTO, ON or OFF")
endif()

set(DELTAFIN_CUDA_ENABLED OFF)
# The libFuzzer tree builds no engine programs, so AUTO leaves CUDA out of it (ON still forces it).
if(_deltafin_cuda STREQUAL "AUTO" AND DELTAFIN_FUZZ)
  set(_deltafin_cuda OFF)
endif()
if(NOT _deltafin_cuda STREQUAL "OFF")
  # nvcc is often installed outside PATH; look where the toolkit puts it before giving up.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(_deltafin_nvcc nvcc HINTS ENV CUDA_PATH PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin /usr/local/cuda)
    if(_deltafin_nvcc)
      set(CMAKE_CUDA_COMPILER ${_deltafin_nvcc} CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(DELTAFIN_CUDA_ENABLED ON)
  elseif(_deltafin_cuda STREQUAL "ON")
    message(FATAL_ERROR "DELTAFIN_CUDA=ON but no working nvcc was found; install the CUDA "
                        "toolkit, set CMAKE_CUDA_COMPILER=/path/to/nvcc, or use -DDELTAFIN_CUDA=OFF")
  endif()
endif()

if(DELTAFIN_CUDA_ENABLED)
  # sm_80 SASS (A100 and newer consumer parts), sm_90a SASS (H100/H200: the form the device notes
  # require; -arch=sm_90a alone also runs a plain sm_90 pass), and compute_80 PTX so a newer GPU
  # (sm_100, sm_120) can JIT it. The flags go to nvcc directly, so no CMAKE_CUDA_ARCHITECTURES.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  if(NOT DEFINED CMAKE_CUDA_COMPILER_LAUNCHER AND DEFINED CMAKE_CXX_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(DELTAFIN_CUDA_GENCODE
      -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
      -gencode=arch=compute_80,code=compute_80)
  # --fmad=false: no implicit multiply-add contraction, so the kernels' rounding is the one
  # written in the source (explicit __fmaf_rn) and a CPU emulation can match it bit for bit.
  set(DELTAFIN_CUDA_FLAGS ${DELTAFIN_CUDA_GENCODE} --fmad=false -Xcompiler=-Wall,-Wextra,-ffp-contract=off)
  if(DELTAFIN_WERROR)
    list(APPEND DELTAFIN_CUDA_FLAGS -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)  # CMake 3.25 knows no CUDA20 for nvcc
  set(CMAKE_CUDA_EXTENSIONS OFF)
  message(STATUS "deltafin: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
else()
  message(STATUS "deltafin: CUDA backend OFF (DELTAFIN_CUDA=${DELTAFIN_CUDA})")
endif()
