# Finds the headers the CUDA stand-in compiles against, under the variable names of the project's
# CUDA detection (which, when it ran first, has set them already): HVD_CUDA_INCLUDE_DIR
# (cuda_runtime_api.h of the CUDA toolkit) and HVD_NCCL_INCLUDE_DIR (nccl.h, e.g. of the
# nvidia-nccl wheel). Either is <name>-NOTFOUND when missing.
if(NOT DEFINED HVD_CUDA_INCLUDE_DIR)
  find_path(HVD_CUDA_INCLUDE_DIR cuda_runtime_api.h
            HINTS $ENV{HOROVOD_CUDA_HOME}/include $ENV{CUDA_HOME}/include /usr/local/cuda/include)
endif()
if(NOT DEFINED HVD_NCCL_INCLUDE_DIR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c
                            "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))"
                    OUTPUT_VARIABLE hvd_nccl_wheel_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(HVD_NCCL_INCLUDE_DIR nccl.h HINTS $ENV{HOROVOD_NCCL_HOME}/include ${hvd_nccl_wheel_include})
endif()
