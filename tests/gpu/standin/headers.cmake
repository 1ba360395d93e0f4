# Finds the headers the CUDA stand-in compiles against:
#   HVD_CUDA_INCLUDE_DIR            cuda_runtime_api.h of the CUDA toolkit: the project's detection
#                                   (cmake/HorovodCuda.cmake, HVD_CUDA_INCLUDE_DIRS) when it found
#                                   it, else searched here;
#   HVD_STANDIN_NCCL_INCLUDE_DIR    the real nccl.h: the detection's HVD_NCCL_INCLUDE_DIR unless that
#                                   is Horovod's own ABI declaration (the stand-in is checked
#                                   against NCCL's header itself), else searched here
#                                   (HOROVOD_NCCL_INCLUDE, HOROVOD_NCCL_HOME, the nvidia-nccl wheel).
# Either is <name>-NOTFOUND when missing; a value set by the caller is kept.
if(NOT DEFINED HVD_CUDA_INCLUDE_DIR)
  if(HVD_CUDA_INCLUDE_DIRS)
    set(HVD_CUDA_INCLUDE_DIR "${HVD_CUDA_INCLUDE_DIRS}")
  else()
    find_path(HVD_CUDA_INCLUDE_DIR cuda_runtime_api.h
              HINTS $ENV{HOROVOD_CUDA_HOME}/include $ENV{CUDA_HOME}/include /usr/local/cuda/include)
  endif()
endif()
if(NOT DEFINED HVD_STANDIN_NCCL_INCLUDE_DIR)
  if(HVD_NCCL_INCLUDE_DIR AND NOT HVD_NCCL_INCLUDE_DIR MATCHES "/nccl_abi/?$")
    set(HVD_STANDIN_NCCL_INCLUDE_DIR "${HVD_NCCL_INCLUDE_DIR}")
  else()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(COMMAND ${Python3_EXECUTABLE} -c
                              "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))"
                      OUTPUT_VARIABLE hvd_nccl_wheel_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
    find_path(HVD_STANDIN_NCCL_INCLUDE_DIR nccl.h
              HINTS $ENV{HOROVOD_NCCL_INCLUDE} $ENV{HOROVOD_NCCL_HOME}/include ${hvd_nccl_wheel_include})
  endif()
endif()
