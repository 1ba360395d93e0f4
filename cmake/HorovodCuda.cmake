# Detection of the CUDA backend's build requirements (docs/gpu.md, "Install / build").
#
# HOROVOD_WITH_CUDA (cache, default AUTO):
#   AUTO  build the CUDA backend when nvcc works and cuda_runtime_api.h is found; otherwise build
#         exactly as without CUDA, saying why in one STATUS line;
#   ON    the same, but a missing piece is a configure error naming it;
#   OFF   never (nvcc is not even looked for).
# Where things come from (first match wins):
#   nvcc              $HOROVOD_CUDA_HOME/bin/nvcc, CMAKE_CUDA_COMPILER, $CUDACXX, nvcc on PATH,
#                     /usr/local/cuda/bin/nvcc
#   CUDA headers      the toolkit of that nvcc (find_package(CUDAToolkit))
#   nccl.h            $HOROVOD_NCCL_INCLUDE, $HOROVOD_NCCL_HOME/include, the installed
#                     nvidia-nccl wheel (nvidia/nccl/include), the toolkit's and the system's
#                     include folders; else Horovod's own declaration of NCCL's ABI
#                     (cpp/backends/cuda/nccl_abi/nccl.h), so that a plain `pip install .` (whose
#                     isolated build environment has no NCCL wheel) still builds the backend.
# A HOROVOD_* variable that is set must point at what it names: otherwise configure fails.
# Nothing is linked: the CUDA runtime and NCCL are dlopen()ed at run time
# (cpp/backends/cuda/cuda_library.h); only the kernel library links the static CUDA runtime.
#
# HOROVOD_CUDA_ARCHITECTURES (cache, default empty) chooses the kernels' GPU architectures.
#
# Sets: HVD_WITH_CUDA (ON/OFF); when ON also HVD_CUDA_INCLUDE_DIRS, HVD_NCCL_INCLUDE_DIR,
# HVD_NCCL_HEADER ("nccl.h of <where>" or "Horovod's NCCL ABI declaration"),
# HVD_NCCL_VERSION_CODE (of the header compiled against, NCCL's formula), HVD_CUDA_ARCHITECTURES,
# and the INTERFACE target hvd_cuda_headers (include folders and HVD_WITH_CUDA=1).

set(HOROVOD_WITH_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found), ON (required), OFF")
set_property(CACHE HOROVOD_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(HOROVOD_CUDA_ARCHITECTURES "" CACHE STRING
    "GPU architectures of the CUDA kernels (CMake syntax); empty: every real one from sm_75 up, plus PTX")
string(TOUPPER "${HOROVOD_WITH_CUDA}" hvd_cuda_mode)
if(hvd_cuda_mode MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(hvd_cuda_mode ON)
elseif(hvd_cuda_mode MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(hvd_cuda_mode OFF)
elseif(NOT hvd_cuda_mode STREQUAL "AUTO")
  message(FATAL_ERROR "HOROVOD_WITH_CUDA=${HOROVOD_WITH_CUDA}: expected AUTO, ON or OFF")
endif()

set(HVD_WITH_CUDA OFF)
set(hvd_cuda_missing "")

# Records why the backend is not built (the first reason wins); fatal when it was required.
macro(hvd_cuda_not_found why)
  if(hvd_cuda_missing STREQUAL "")
    set(hvd_cuda_missing "${why}")
    if(hvd_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "HOROVOD_WITH_CUDA=ON but ${why} (docs/gpu.md)")
    endif()
  endif()
endmacro()

# ---- nvcc ----------------------------------------------------------------------------------------
set(hvd_nvcc "")
if(hvd_cuda_mode STREQUAL "OFF")
  set(hvd_cuda_missing "HOROVOD_WITH_CUDA=OFF")
elseif(DEFINED ENV{HOROVOD_CUDA_HOME} AND NOT "$ENV{HOROVOD_CUDA_HOME}" STREQUAL "")
  set(hvd_nvcc "$ENV{HOROVOD_CUDA_HOME}/bin/nvcc")
  if(NOT EXISTS "${hvd_nvcc}")
    message(FATAL_ERROR "HOROVOD_CUDA_HOME=$ENV{HOROVOD_CUDA_HOME}: ${hvd_nvcc} does not exist "
                        "(HOROVOD_CUDA_HOME names the CUDA toolkit's folder, the one holding bin/nvcc)")
  endif()
  set(CUDAToolkit_ROOT "$ENV{HOROVOD_CUDA_HOME}")
elseif(CMAKE_CUDA_COMPILER)
  set(hvd_nvcc "${CMAKE_CUDA_COMPILER}")
elseif(DEFINED ENV{CUDACXX} AND NOT "$ENV{CUDACXX}" STREQUAL "")
  set(hvd_nvcc "$ENV{CUDACXX}")
else()
  find_program(HVD_NVCC_EXECUTABLE nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(HVD_NVCC_EXECUTABLE)
    set(hvd_nvcc "${HVD_NVCC_EXECUTABLE}")
  else()
    hvd_cuda_not_found("nvcc was not found (PATH, /usr/local/cuda/bin; or set HOROVOD_CUDA_HOME)")
  endif()
endif()

# Does that nvcc work with this host compiler? (A sub-project, so that a broken one is a STATUS
# line under AUTO rather than a failed configure.)
if(hvd_nvcc)
  if(NOT CMAKE_CUDA_COMPILER)
    include(CheckLanguage)
    set(hvd_saved_cudacxx "$ENV{CUDACXX}")
    set(ENV{CUDACXX} "${hvd_nvcc}")
    check_language(CUDA)
    set(ENV{CUDACXX} "${hvd_saved_cudacxx}")
    if(NOT CMAKE_CUDA_COMPILER)
      hvd_cuda_not_found("${hvd_nvcc} cannot compile CUDA with this host compiler (${CMAKE_CXX_COMPILER}); see CMakeFiles/CheckCUDA")
      set(hvd_nvcc "")
    endif()
  endif()
endif()
if(hvd_nvcc)
  # The kernel library is compiled through ccache when the C++ code is.
  if(CMAKE_CXX_COMPILER_LAUNCHER AND NOT CMAKE_CUDA_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER "${CMAKE_CXX_COMPILER_LAUNCHER}")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_path(HVD_CUDA_RUNTIME_INCLUDE cuda_runtime_api.h HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
  if(NOT CUDAToolkit_FOUND OR NOT HVD_CUDA_RUNTIME_INCLUDE)
    hvd_cuda_not_found("cuda_runtime_api.h was not found next to ${CMAKE_CUDA_COMPILER} (CUDA toolkit ${CUDAToolkit_INCLUDE_DIRS})")
  endif()
endif()

# ---- nccl.h --------------------------------------------------------------------------------------
if(hvd_cuda_missing STREQUAL "")
  set(hvd_nccl_dir "")
  if(DEFINED ENV{HOROVOD_NCCL_INCLUDE} AND NOT "$ENV{HOROVOD_NCCL_INCLUDE}" STREQUAL "")
    if(NOT EXISTS "$ENV{HOROVOD_NCCL_INCLUDE}/nccl.h")
      message(FATAL_ERROR "HOROVOD_NCCL_INCLUDE=$ENV{HOROVOD_NCCL_INCLUDE}: there is no nccl.h there")
    endif()
    set(hvd_nccl_dir "$ENV{HOROVOD_NCCL_INCLUDE}")
    set(HVD_NCCL_HEADER "nccl.h of HOROVOD_NCCL_INCLUDE")
  elseif(DEFINED ENV{HOROVOD_NCCL_HOME} AND NOT "$ENV{HOROVOD_NCCL_HOME}" STREQUAL "")
    if(NOT EXISTS "$ENV{HOROVOD_NCCL_HOME}/include/nccl.h")
      message(FATAL_ERROR "HOROVOD_NCCL_HOME=$ENV{HOROVOD_NCCL_HOME}: there is no include/nccl.h there")
    endif()
    set(hvd_nccl_dir "$ENV{HOROVOD_NCCL_HOME}/include")
    set(HVD_NCCL_HEADER "nccl.h of HOROVOD_NCCL_HOME")
  endif()
  if(NOT hvd_nccl_dir)
    # The nvidia-nccl-cu1x wheel of the Python that builds us (the one the loader prefers too).
    if(Python_EXECUTABLE)
      set(hvd_python "${Python_EXECUTABLE}")
    else()
      find_program(hvd_python NAMES python3 python NO_CACHE)
    endif()
    if(hvd_python)
      execute_process(
        COMMAND "${hvd_python}" -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
        OUTPUT_VARIABLE hvd_nccl_pkg OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE hvd_rc)
      if(hvd_rc EQUAL 0 AND EXISTS "${hvd_nccl_pkg}/include/nccl.h")
        set(hvd_nccl_dir "${hvd_nccl_pkg}/include")
        set(HVD_NCCL_HEADER "nccl.h of the nvidia-nccl wheel")
      endif()
    endif()
  endif()
  if(NOT hvd_nccl_dir)
    find_path(hvd_nccl_system nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/include /usr/local/include NO_CACHE)
    if(hvd_nccl_system)
      set(hvd_nccl_dir "${hvd_nccl_system}")
      set(HVD_NCCL_HEADER "nccl.h of the system")
    endif()
  endif()
  if(NOT hvd_nccl_dir)
    set(hvd_nccl_dir "${PROJECT_SOURCE_DIR}/cpp/backends/cuda/nccl_abi")
    set(HVD_NCCL_HEADER "Horovod's NCCL ABI declaration (no nccl.h found)")
  endif()
  file(STRINGS "${hvd_nccl_dir}/nccl.h" hvd_nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} +([0-9]+)" _ "${hvd_nccl_defs}")
    set(hvd_nccl_${part} "${CMAKE_MATCH_1}")
  endforeach()
  if(hvd_nccl_MAJOR STREQUAL "" OR hvd_nccl_MINOR STREQUAL "" OR hvd_nccl_PATCH STREQUAL "")
    message(FATAL_ERROR "${hvd_nccl_dir}/nccl.h defines no NCCL_MAJOR/MINOR/PATCH: not an NCCL header")
  endif()
  # NCCL's version code: 2.8.4 -> 2804 (up to 2.8), 2.32.3 -> 23203 (from 2.9).
  if(hvd_nccl_MAJOR LESS_EQUAL 2 AND hvd_nccl_MINOR LESS_EQUAL 8)
    math(EXPR HVD_NCCL_VERSION_CODE "${hvd_nccl_MAJOR} * 1000 + ${hvd_nccl_MINOR} * 100 + ${hvd_nccl_PATCH}")
  else()
    math(EXPR HVD_NCCL_VERSION_CODE "${hvd_nccl_MAJOR} * 10000 + ${hvd_nccl_MINOR} * 100 + ${hvd_nccl_PATCH}")
  endif()
  set(HVD_NCCL_INCLUDE_DIR "${hvd_nccl_dir}")
  set(HVD_CUDA_INCLUDE_DIRS ${CUDAToolkit_INCLUDE_DIRS})

  # Kernel architectures: every real sm_XX from 7.5 up that this nvcc can emit, plus PTX of the
  # newest (JIT-compiled on GPUs newer than the toolkit); HOROVOD_CUDA_ARCHITECTURES overrides
  # (CMake's syntax, e.g. "90-real" for a quick build on one card).
  if(HOROVOD_CUDA_ARCHITECTURES)
    set(HVD_CUDA_ARCHITECTURES "${HOROVOD_CUDA_ARCHITECTURES}")
  else()
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-code
      OUTPUT_VARIABLE hvd_codes RESULT_VARIABLE hvd_rc ERROR_QUIET)
    string(REGEX MATCHALL "sm_[0-9]+\n" hvd_codes "${hvd_codes}\n")
    set(HVD_CUDA_ARCHITECTURES "")
    set(hvd_newest 0)
    foreach(code ${hvd_codes})
      string(REGEX REPLACE "sm_([0-9]+)\n" "\\1" arch "${code}")
      if(arch GREATER_EQUAL 75)
        list(APPEND HVD_CUDA_ARCHITECTURES "${arch}-real")
        if(arch GREATER hvd_newest)
          set(hvd_newest ${arch})
        endif()
      endif()
    endforeach()
    if(hvd_newest EQUAL 0)
      hvd_cuda_not_found("${CMAKE_CUDA_COMPILER} --list-gpu-code lists no architecture from sm_75 up")
    else()
      list(APPEND HVD_CUDA_ARCHITECTURES "${hvd_newest}-virtual")
    endif()
  endif()
endif()

if(hvd_cuda_missing STREQUAL "")
  set(HVD_WITH_CUDA ON)
  add_library(hvd_cuda_headers INTERFACE)
  target_include_directories(hvd_cuda_headers INTERFACE ${HVD_CUDA_INCLUDE_DIRS} ${HVD_NCCL_INCLUDE_DIR})
  target_compile_definitions(hvd_cuda_headers INTERFACE HVD_WITH_CUDA=1)
  message(STATUS "CUDA backend: built (CUDA ${CUDAToolkit_VERSION}, ${CMAKE_CUDA_COMPILER}; "
                 "NCCL ${hvd_nccl_MAJOR}.${hvd_nccl_MINOR}.${hvd_nccl_PATCH} from ${HVD_NCCL_HEADER}: "
                 "${HVD_NCCL_INCLUDE_DIR}; kernels for ${HVD_CUDA_ARCHITECTURES})")
else()
  message(STATUS "CUDA backend: not built (${hvd_cuda_missing})")
endif()
