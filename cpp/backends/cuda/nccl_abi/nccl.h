// Horovod's declaration of the part of NCCL's ABI it uses, for builds that find no nccl.h (a
// plain `pip install .` builds in an isolated environment without the nvidia-nccl wheel). The
// CUDA backend never links NCCL: it resolves these entry points from libnccl.so.2 at run time
// (cuda_library.h), so the declarations are all the build needs. cmake/HorovodCuda.cmake puts
// this folder on the include path only when no real nccl.h was found; a build with a real one
// checks every declaration here against it at compile time (tests/cpp/backends_cuda).
#ifndef HVD_NCCL_ABI_NCCL_H
#define HVD_NCCL_ABI_NCCL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

// The oldest NCCL whose ABI this declares (2.13.4): what nccl_built() reports for such a build.
#define NCCL_MAJOR 2
#define NCCL_MINOR 13
#define NCCL_PATCH 4
#define NCCL_VERSION_CODE 21304
#define HVD_NCCL_ABI_DECLARATION 1

#ifdef __cplusplus
extern "C" {
#endif

#include "nccl_abi.inc"

#define HVD_NCCL_ABI_DECLARE(ret, name, params) ret name params;
HVD_NCCL_ABI_FUNCTIONS(HVD_NCCL_ABI_DECLARE)
#undef HVD_NCCL_ABI_DECLARE

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // HVD_NCCL_ABI_NCCL_H
