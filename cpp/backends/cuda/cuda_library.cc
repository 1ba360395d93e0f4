#include "backends/cuda/cuda_library.h"

#include <dlfcn.h>

#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "common/build_reports.h"
#include "common/package_dirs.h"

namespace hvd::cuda {
namespace {

Param<std::string> kCudaLibrary("HOROVOD_CUDA_LIBRARY", "",
                                "Path of the CUDA runtime library to load instead of searching for libcudart.so "
                                "(docs/gpu.md); the host-memory stand-in in tests");
Param<std::string> kNcclLibrary("HOROVOD_NCCL_LIBRARY", "",
                                "Path of the NCCL library to load instead of searching for libnccl.so.2 "
                                "(docs/gpu.md); the host-memory stand-in in tests");

constexpr const char* kKernelsFile = "libhorovod_cuda_kernels.so";

// The folder of the binary this code is linked into (horovod/_core*.so or libhorovod.so).
std::string ownDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaBuilt), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string parentOf(const std::string& dir) {
  size_t slash = dir.rfind('/');
  return slash == std::string::npos || slash == 0 ? std::string() : dir.substr(0, slash);
}

// ".../site-packages" (or dist-packages) prefixes of every library mapped into this process.
std::vector<std::string> mappedPackageDirs() {
  std::vector<std::string> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::set<std::string> seen;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
      size_t at = path.find(marker);
      if (at == std::string::npos) continue;
      std::string dir = path.substr(0, at + std::char_traits<char>::length(marker) - 1);
      if (seen.insert(dir).second) out.push_back(dir);
    }
  }
  return out;
}

// Loaded tables live as long as the process (the libraries are never unloaded either), in
// storage that stays reachable (so leak checkers see no leak) and never moves.
template <typename Table>
const Table& keep(const Table& table) {
  static std::mutex mu;
  static auto* kept = new std::deque<Table>();
  std::lock_guard<std::mutex> lock(mu);
  return kept->emplace_back(table);
}

void appendReason(std::string* why, const std::string& reason) {
  if (!why->empty()) *why += "; ";
  *why += reason;
}

// A library already in the process under one of `sonames` (RTLD_NOLOAD), or nullptr.
void* alreadyLoaded(const std::vector<std::string>& sonames, std::string* path) {
  for (const auto& soname : sonames) {
    void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    char origin[4096] = {0};
    *path = dlinfo(handle, RTLD_DI_ORIGIN, origin) == 0 ? std::string(origin) + "/" + soname : soname;
    return handle;
  }
  return nullptr;
}

// Opens the first of `candidates` that dlopen accepts; every failure is added to `why`.
void* openFirst(const std::vector<std::string>& candidates, std::string* path, std::string* why) {
  for (const auto& candidate : candidates) {
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      // A bare soname was found by the dynamic linker: report the folder it came from.
      char origin[4096] = {0};
      bool bare = candidate.find('/') == std::string::npos;
      *path = bare && dlinfo(handle, RTLD_DI_ORIGIN, origin) == 0 ? std::string(origin) + "/" + candidate : candidate;
      return handle;
    }
    const char* e = dlerror();
    appendReason(why, e != nullptr ? std::string(e) : candidate + ": dlopen failed");
  }
  return nullptr;
}

// Where to look for `file` in the wheels: <package dir>/<each of subdirs>/<file>.
std::vector<std::string> wheelCandidates(const CudaSearch& search, const std::vector<std::string>& subdirs,
                                         const std::vector<std::string>& files) {
  std::vector<std::string> out;
  for (const auto& dir : search.packageDirs) {
    for (const auto& sub : subdirs) {
      for (const auto& file : files) {
        std::string candidate = dir + "/" + sub + "/" + file;
        if (std::ifstream(candidate).good()) out.push_back(candidate);
      }
    }
  }
  return out;
}

// Resolves every `fields[i]` from `handle` by its symbol name; the names it could not find.
std::vector<std::string> resolve(void* handle, const std::vector<std::pair<void**, const char*>>& fields) {
  std::vector<std::string> missing;
  for (const auto& [slot, symbol] : fields) {
    *slot = dlsym(handle, symbol);
    if (*slot == nullptr) missing.push_back(symbol);
  }
  return missing;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

template <typename F>
void** slot(F* field) {
  return reinterpret_cast<void**>(field);
}

std::vector<std::string> resolveRuntime(void* handle, RuntimeApi* rt) {
  return resolve(handle, {{slot(&rt->getErrorString), "cudaGetErrorString"},
                          {slot(&rt->getLastError), "cudaGetLastError"},
                          {slot(&rt->runtimeGetVersion), "cudaRuntimeGetVersion"},
                          {slot(&rt->driverGetVersion), "cudaDriverGetVersion"},
                          {slot(&rt->getDeviceCount), "cudaGetDeviceCount"},
                          {slot(&rt->getDevice), "cudaGetDevice"},
                          {slot(&rt->setDevice), "cudaSetDevice"},
                          {slot(&rt->pointerGetAttributes), "cudaPointerGetAttributes"},
                          {slot(&rt->malloc), "cudaMalloc"},
                          {slot(&rt->free), "cudaFree"},
                          {slot(&rt->hostAlloc), "cudaHostAlloc"},
                          {slot(&rt->freeHost), "cudaFreeHost"},
                          {slot(&rt->memcpyAsync), "cudaMemcpyAsync"},
                          {slot(&rt->memsetAsync), "cudaMemsetAsync"},
                          {slot(&rt->streamCreateWithFlags), "cudaStreamCreateWithFlags"},
                          {slot(&rt->streamDestroy), "cudaStreamDestroy"},
                          {slot(&rt->streamWaitEvent), "cudaStreamWaitEvent"},
                          {slot(&rt->streamSynchronize), "cudaStreamSynchronize"},
                          {slot(&rt->streamQuery), "cudaStreamQuery"},
                          {slot(&rt->eventCreateWithFlags), "cudaEventCreateWithFlags"},
                          {slot(&rt->eventDestroy), "cudaEventDestroy"},
                          {slot(&rt->eventRecord), "cudaEventRecord"},
                          {slot(&rt->eventQuery), "cudaEventQuery"},
                          {slot(&rt->eventSynchronize), "cudaEventSynchronize"},
                          {slot(&rt->deviceSynchronize), "cudaDeviceSynchronize"},
                          {slot(&rt->deviceGetAttribute), "cudaDeviceGetAttribute"},
                          {slot(&rt->memPoolCreate), "cudaMemPoolCreate"},
                          {slot(&rt->memPoolDestroy), "cudaMemPoolDestroy"},
                          {slot(&rt->memPoolSetAttribute), "cudaMemPoolSetAttribute"},
                          {slot(&rt->mallocFromPoolAsync), "cudaMallocFromPoolAsync"},
                          {slot(&rt->freeAsync), "cudaFreeAsync"}});
}

std::vector<std::string> resolveNccl(void* handle, NcclApi* nccl) {
  return resolve(handle, {{slot(&nccl->getVersion), "ncclGetVersion"},
                          {slot(&nccl->getErrorString), "ncclGetErrorString"},
                          {slot(&nccl->getLastError), "ncclGetLastError"},
                          {slot(&nccl->getUniqueId), "ncclGetUniqueId"},
                          {slot(&nccl->commInitRank), "ncclCommInitRank"},
                          {slot(&nccl->commDestroy), "ncclCommDestroy"},
                          {slot(&nccl->commAbort), "ncclCommAbort"},
                          {slot(&nccl->commGetAsyncError), "ncclCommGetAsyncError"},
                          {slot(&nccl->allReduce), "ncclAllReduce"},
                          {slot(&nccl->allGather), "ncclAllGather"},
                          {slot(&nccl->broadcast), "ncclBroadcast"},
                          {slot(&nccl->reduceScatter), "ncclReduceScatter"},
                          {slot(&nccl->send), "ncclSend"},
                          {slot(&nccl->recv), "ncclRecv"},
                          {slot(&nccl->groupStart), "ncclGroupStart"},
                          {slot(&nccl->groupEnd), "ncclGroupEnd"}});
}

// The kernel table `handle` exports, checked; nullptr and the reason otherwise.
const HvdCudaKernels* kernelTable(void* handle, const std::string& path, std::string* why) {
  auto entry = reinterpret_cast<HvdCudaKernelsFn>(dlsym(handle, HVD_CUDA_KERNELS_SYMBOL));
  if (entry == nullptr) {
    *why = path + ": no " HVD_CUDA_KERNELS_SYMBOL " symbol (not Horovod's CUDA kernel library)";
    return nullptr;
  }
  const HvdCudaKernels* table = entry();
  if (table == nullptr || table->version != kHvdCudaKernelsVersion) {
    *why = path + ": kernel table version " + (table ? std::to_string(table->version) : std::string("(none)")) +
           ", this core needs " + std::to_string(kHvdCudaKernelsVersion) +
           ": it was built by another Horovod version; rebuild and reinstall Horovod";
    return nullptr;
  }
  if (table->batchedCopy == nullptr || table->scale == nullptr) {
    *why = path + ": the kernel table has empty entries";
    return nullptr;
  }
  return table;
}

// NCCL into `api->nccl` (left null with `out->ncclError` set when it cannot be loaded).
void loadNccl(const EnvLookup& env, const CudaSearch& search, CudaLibraries* out, CudaApi* api) {
  void* handle = nullptr;
  std::string why;
  if (kNcclLibrary.isSet(env)) {
    handle = openFirst({kNcclLibrary.get(env)}, &out->ncclPath, &why);
    if (handle == nullptr) why = "HOROVOD_NCCL_LIBRARY=" + kNcclLibrary.get(env) + ": " + why;
  } else {
    handle = alreadyLoaded(search.ncclSonames, &out->ncclPath);
    if (handle == nullptr) {
      std::vector<std::string> candidates =
          wheelCandidates(search, {"nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"}, search.ncclSonames);
      candidates.insert(candidates.end(), search.ncclSonames.begin(), search.ncclSonames.end());
      handle = openFirst(candidates, &out->ncclPath, &why);
    }
    if (handle == nullptr) {
      why = "NCCL was not found (install the nvidia-nccl-cu13 wheel, or set HOROVOD_NCCL_LIBRARY): " + why;
    }
  }
  if (handle == nullptr) {
    out->ncclError = why;
    return;
  }
  NcclApi nccl;
  std::vector<std::string> missing = resolveNccl(handle, &nccl);
  if (!missing.empty()) {
    out->ncclError = out->ncclPath + " lacks " + joined(missing) + " (NCCL 2.13 or newer is needed)";
    return;
  }
  api->nccl = &keep(nccl);
}

}  // namespace

bool cudaBuilt() { return true; }

CudaSearch defaultCudaSearch() {
  CudaSearch search;
  std::string own = ownDirectory();
  // horovod/_core*.so -> the site-packages folder holding horovod.
  if (!own.empty()) search.packageDirs.push_back(parentOf(own));
  std::vector<std::string> candidates = pythonPackageDirs();
  for (const auto& dir : mappedPackageDirs()) candidates.push_back(dir);
  for (const auto& dir : candidates) {
    bool seen = false;
    for (const auto& d : search.packageDirs) seen = seen || d == dir;
    if (!seen) search.packageDirs.push_back(dir);
  }
  search.runtimeSonames = {"libcudart.so.13", "libcudart.so.12"};
  search.ncclSonames = {"libnccl.so.2"};
  search.kernelsDir = own;
  return search;
}

CudaLibraries loadCudaLibraries(const EnvLookup& env, const CudaSearch& search) {
  CudaLibraries out;
  void* runtime = nullptr;
  std::string why;
  if (kCudaLibrary.isSet(env)) {
    runtime = openFirst({kCudaLibrary.get(env)}, &out.runtimePath, &why);
    if (runtime == nullptr) why = "HOROVOD_CUDA_LIBRARY=" + kCudaLibrary.get(env) + ": " + why;
  } else {
    runtime = alreadyLoaded(search.runtimeSonames, &out.runtimePath);
    if (runtime == nullptr) {
      std::vector<std::string> candidates = wheelCandidates(
          search, {"nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "nvidia/cu12/lib"}, search.runtimeSonames);
      candidates.insert(candidates.end(), search.runtimeSonames.begin(), search.runtimeSonames.end());
      runtime = openFirst(candidates, &out.runtimePath, &why);
    }
    if (runtime == nullptr) {
      why =
          "the CUDA runtime was not found (install torch with CUDA or the nvidia-cuda-runtime wheel, or set "
          "HOROVOD_CUDA_LIBRARY): " +
          why;
    }
  }
  if (runtime == nullptr) {
    out.error = why;
    return out;
  }
  CudaApi loaded;
  CudaApi* api = &loaded;
  std::vector<std::string> missing = resolveRuntime(runtime, &api->rt);
  if (!missing.empty()) {
    out.error = out.runtimePath + " lacks " + joined(missing) + " (not a CUDA runtime library Horovod can use)";
    return out;
  }

  // The kernels: from the runtime library when it carries them (the stand-in), else Horovod's.
  if (dlsym(runtime, HVD_CUDA_KERNELS_SYMBOL) != nullptr) {
    out.kernelsPath = out.runtimePath;
    api->kernels = kernelTable(runtime, out.kernelsPath, &why);
  } else {
    std::string file = search.kernelsDir.empty() ? std::string(kKernelsFile) : search.kernelsDir + "/" + kKernelsFile;
    why.clear();
    void* kernels = openFirst({file}, &out.kernelsPath, &why);
    if (kernels == nullptr) {
      why = "Horovod's CUDA kernel library could not be loaded (reinstall Horovod with nvcc on PATH): " + why;
    } else {
      api->kernels = kernelTable(kernels, out.kernelsPath, &why);
    }
  }
  if (api->kernels == nullptr) {
    out.error = why;
    return out;
  }

  loadNccl(env, search, &out, api);
  out.api = &keep(loaded);
  return out;
}

const CudaLibraries& cudaLibraries() {
  static const CudaLibraries loaded = loadCudaLibraries(processEnvironment(), defaultCudaSearch());
  return loaded;
}

namespace {

// What this build tells horovod._core and --check-build (common/build_reports.h).
BuildReport cudaBuildReport() {
  return {{"nccl_version_code", std::to_string(NCCL_VERSION_CODE)},
#ifdef HVD_NCCL_ABI_DECLARATION
          {"nccl_header", "Horovod's NCCL ABI declaration"},
#else
          {"nccl_header", "nccl.h"},
#endif
          {"cuda_headers_version", std::to_string(CUDART_VERSION)}};
}

BuildReport cudaLibrariesReport() {
  const CudaLibraries& libs = cudaLibraries();
  BuildReport report = {{"runtime", libs.runtimePath},
                        {"nccl", libs.ncclPath},
                        {"kernels", libs.kernelsPath},
                        {"error", libs.error},
                        {"nccl_error", libs.ncclError}};
  if (libs.api != nullptr) {
    int version = 0;
    if (libs.api->rt.runtimeGetVersion(&version) == cudaSuccess)
      report.emplace_back("runtime_version", std::to_string(version));
    version = 0;
    if (libs.api->rt.driverGetVersion(&version) == cudaSuccess)
      report.emplace_back("driver_version", std::to_string(version));
    int devices = 0;
    cudaError_t status = libs.api->rt.getDeviceCount(&devices);
    report.emplace_back("device_count", status == cudaSuccess
                                            ? std::to_string(devices)
                                            : std::string("0 (") + libs.api->rt.getErrorString(status) + ")");
  }
  if (libs.api != nullptr && libs.api->nccl != nullptr) {
    int version = 0;
    if (libs.api->nccl->getVersion(&version) == ncclSuccess)
      report.emplace_back("nccl_version", std::to_string(version));
  }
  return report;
}

const bool kRegistered = [] {
  registerBuildReport("cuda", cudaBuildReport);
  registerBuildReport("cuda_libraries", cudaLibrariesReport);
  return true;
}();

}  // namespace

}  // namespace hvd::cuda
