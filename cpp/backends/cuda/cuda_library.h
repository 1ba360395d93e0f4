// The CUDA runtime, NCCL and the kernel library of this process, loaded on first use (dlopen, as
// the MPI plugins are): nothing here is touched unless a job hands Horovod a CUDA tensor or asks
// what the build has, so a CPU-only machine never loads a CUDA library.
//
// Where the libraries come from, first match wins:
//   CUDA runtime: HOROVOD_CUDA_LIBRARY (a path, and then only that path; the stand-in in tests),
//                 else a libcudart.so.13/.12 already loaded into the process (torch's, so that
//                 the process keeps one runtime), else the libcudart.so.* of the nvidia-cuda-runtime
//                 wheel torch depends on, else the dynamic linker's search (libcudart.so.13, .12).
//   NCCL:         HOROVOD_NCCL_LIBRARY (only that path), else a libnccl.so.2 already loaded, else
//                 the nvidia-nccl wheel's libnccl.so.2, else the dynamic linker's libnccl.so.2.
//                 Optional: without it only the host-staged path runs (and
//                 HOROVOD_GPU_OPERATIONS=nccl fails init, naming what is missing).
//   Kernels:      the CUDA runtime library itself when it exports HVD_CUDA_KERNELS_SYMBOL (the
//                 stand-in does), else libhorovod_cuda_kernels.so next to the core library.
// The wheels are looked for in the site-packages folders of the core library itself
// (horovod/_core*.so), of the Python interpreter's sys.path (common/package_dirs.h), and of the
// libraries already loaded from a site-packages folder (torch's, JAX's, CuPy's).
// Process-wide (a process has one CUDA runtime); thread-safe; loaded once and never unloaded.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "common/params.h"

namespace hvd::cuda {

// What loading found. `api` is null when the CUDA runtime or the kernels could not be loaded;
// `error` then says which library, from where, and why (dlerror, a missing entry point, a kernel
// table of another version). `api->nccl` is null when NCCL could not be loaded; `ncclError` says
// why. Paths are what was actually opened, for --check-build and error messages.
struct CudaLibraries {
  const CudaApi* api = nullptr;
  std::string error;
  std::string ncclError;
  std::string runtimePath;
  std::string ncclPath;
  std::string kernelsPath;
};

// Loads on the first call (the environment is read then); later calls return the same result.
const CudaLibraries& cudaLibraries();

// The CUDA backend was compiled into this build (nvcc and the NCCL headers were found).
bool cudaBuilt();

// ---- for tests: what cudaLibraries() does, with its inputs spelled out and without caching ----

// Where the loader looks besides the HOROVOD_* variables.
struct CudaSearch {
  std::vector<std::string> packageDirs;     // site-packages folders holding the nvidia wheels
  std::vector<std::string> runtimeSonames;  // for the already-loaded check and the linker's search
  std::vector<std::string> ncclSonames;
  std::string kernelsDir;  // where libhorovod_cuda_kernels.so is installed (next to the core)
};
// The search cudaLibraries() uses (see the comment at the top).
CudaSearch defaultCudaSearch();
// Loads as described at the top, reading HOROVOD_CUDA_LIBRARY / HOROVOD_NCCL_LIBRARY from `env`.
// The result's tables are never freed (nor are the libraries unloaded).
CudaLibraries loadCudaLibraries(const EnvLookup& env, const CudaSearch& search);

}  // namespace hvd::cuda
