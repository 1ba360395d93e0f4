// Registers the NCCL backend for CUDA devices (nccl_backend.h). The host-staged factory ranks
// above it and makes the set's choice for both (gpu_operations.h): this one is asked only when
// the set agreed on NCCL (every member loads NCCL, no two share a GPU).
#include "backends/cuda/cuda_library.h"
#include "backends/cuda/gpu_operations.h"
#include "backends/cuda/nccl_backend.h"
#include "common/logging.h"

namespace hvd::cuda {
namespace {

std::unique_ptr<engine::CollectiveBackend> makeNcclBackend(const BackendContext& context) {
  const CudaLibraries& libraries = cudaLibraries();
  // Asked only after the set agreed on NCCL, which every member can load.
  HVD_CHECK(libraries.api != nullptr && libraries.api->nccl != nullptr) << "NCCL agreed on but not loaded";
  HVD_LOG(Debug) << "process set " << context.set.id << " runs on " << deviceName(context.device) << " through NCCL ("
                 << libraries.ncclPath << "), " << context.config.numNcclStreams << " stream(s)";
  return std::make_unique<NcclBackend>(*libraries.api, context, static_cast<int>(context.config.numNcclStreams));
}

const bool kRegistered = [] {
  engine::BackendFactory factory;
  factory.name = kNcclBackendName;
  factory.devices = {DeviceKind::kCuda};
  factory.priority = 10;  // below cuda_staged (20), which declines when the set agreed on NCCL
  factory.make = makeNcclBackend;
  engine::registerBackend(std::move(factory));
  return true;
}();

}  // namespace
}  // namespace hvd::cuda
