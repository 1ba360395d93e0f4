#include "backends/cuda/gpu_operations.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_library.h"
#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "common/logging.h"
#include "engine/process_set_table.h"
#include "horovod/errors.h"

namespace hvd::cuda {
namespace {

using engine::GpuOperations;

bool ncclBackendBuilt() {
  const std::vector<std::string> names = engine::backendNames(DeviceKind::kCuda);
  return std::find(names.begin(), names.end(), kNcclBackendName) != names.end();
}

// What one member tells the others (fixed size: exchanged with one allgather).
struct MemberFacts {
  uint8_t requested = 0;  // GpuOperations
  uint8_t cudaLoads = 0;
  uint8_t ncclLoads = 0;
  uint8_t pad[5] = {};
  int64_t chunkBytes = 0;
  char gpu[48] = {};  // the physical GPU on its host (CUDA_VISIBLE_DEVICES entry, or ordinal)
};

std::string physicalGpu(int ordinal) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0') {
    std::stringstream list(visible);
    std::string item;
    for (int i = 0; std::getline(list, item, ','); ++i) {
      if (i == ordinal) return item;
    }
  }
  return std::to_string(ordinal);
}

std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// Global ranks grouped by a value each member reported; more than one group = they differ.
template <class Key>
std::map<Key, std::vector<int>> groupBy(const std::vector<MemberFacts>& facts, const Communicator& comm,
                                        Key (*key)(const MemberFacts&)) {
  std::map<Key, std::vector<int>> groups;
  for (int i = 0; i < comm.size(); ++i) groups[key(facts[i])].push_back(comm.globalRank(i));
  return groups;
}

template <class Key, class Describe>
void requireEqual(const std::map<Key, std::vector<int>>& groups, int32_t set, const char* what, Describe describe) {
  if (groups.size() <= 1) return;
  std::string text;
  for (const auto& [value, ranks] : groups) {
    text += (text.empty() ? "" : "; ") + std::string("ranks ") + rankList(ranks) + ": " + describe(value);
  }
  throw Error("GPU backend of process set " + std::to_string(set) + ": ranks differ in " + what + " (" + text +
              "); every rank of a process set must use the same settings");
}

}  // namespace

void checkGpuOperations(const engine::Config& config) {
  if (config.gpuOperations != GpuOperations::kNccl) return;
  if (!ncclBackendBuilt()) {
    throw InvalidArgument(config.gpuOperationsSource +
                          ": this build has no NCCL backend; use HOROVOD_GPU_OPERATIONS=HOST (docs/gpu.md)");
  }
  const CudaLibraries& libraries = cudaLibraries();
  if (libraries.api == nullptr) {
    throw InvalidArgument(config.gpuOperationsSource + ": the CUDA libraries could not be loaded: " + libraries.error);
  }
  if (libraries.api->nccl == nullptr) {
    throw InvalidArgument(config.gpuOperationsSource + ": NCCL could not be loaded: " + libraries.ncclError +
                          " (set HOROVOD_NCCL_LIBRARY to libnccl.so.2, or use HOROVOD_GPU_OPERATIONS=HOST)");
  }
}

GpuOperations agreeGpuOperations(const engine::BackendContext& context) {
  const engine::Config& config = context.config;
  Communicator comm(context.transport, context.set.ranks, config.timeout);
  MemberFacts mine;
  mine.requested = static_cast<uint8_t>(config.gpuOperations);
  const CudaLibraries& libraries = cudaLibraries();
  mine.cudaLoads = libraries.api != nullptr ? 1 : 0;
  mine.ncclLoads = libraries.api != nullptr && libraries.api->nccl != nullptr ? 1 : 0;
  mine.chunkBytes = config.gpuStagedChunkBytes;
  const std::string gpu = physicalGpu(context.device.index);
  std::strncpy(mine.gpu, gpu.c_str(), sizeof(mine.gpu) - 1);

  std::vector<MemberFacts> facts(static_cast<size_t>(comm.size()));
  const std::vector<size_t> bytes(static_cast<size_t>(comm.size()), sizeof(MemberFacts));
  collectives::allgatherv(comm, &mine, facts.data(), bytes);

  const int32_t set = context.set.id;
  requireEqual(groupBy<int>(facts, comm, [](const MemberFacts& f) { return int(f.requested); }), set,
               "HOROVOD_GPU_OPERATIONS (and the per-op HOROVOD_GPU_* variables)",
               [](int v) { return std::string(engine::gpuOperationsName(static_cast<GpuOperations>(v))); });
  requireEqual(groupBy<int64_t>(facts, comm, [](const MemberFacts& f) { return f.chunkBytes; }), set,
               "HOROVOD_GPU_STAGED_CHUNK_BYTES", [](int64_t v) { return std::to_string(v); });

  std::vector<int> noCuda, noNccl;
  std::map<std::pair<int, std::string>, std::vector<int>> byGpu;
  const Communicator::HostLayout& hosts = comm.hosts();
  for (int i = 0; i < comm.size(); ++i) {
    if (facts[i].cudaLoads == 0) noCuda.push_back(comm.globalRank(i));
    if (facts[i].ncclLoads == 0) noNccl.push_back(comm.globalRank(i));
    const std::string id(facts[i].gpu, strnlen(facts[i].gpu, sizeof(facts[i].gpu)));
    byGpu[{hosts.hostOfRank[i], id}].push_back(comm.globalRank(i));
  }
  std::string sharing;
  for (const auto& [where, ranks] : byGpu) {
    if (ranks.size() > 1)
      sharing += (sharing.empty() ? "ranks " : "; ranks ") + rankList(ranks) + " on GPU " + where.second;
  }

  const auto requested = static_cast<GpuOperations>(mine.requested);
  const std::string where = "process set " + std::to_string(set) + " (" + deviceName(context.device) + ")";
  if (!noCuda.empty()) {
    throw Error("GPU collectives of " + where + " need the CUDA runtime, which could not be loaded on ranks " +
                rankList(noCuda) + (mine.cudaLoads == 0 ? ": " + libraries.error : std::string()));
  }
  if (requested == GpuOperations::kNccl) {
    if (!noNccl.empty()) {
      throw Error(config.gpuOperationsSource + ": NCCL could not be loaded on ranks " + rankList(noNccl) + " of " +
                  where);
    }
    if (!sharing.empty()) {
      throw Error(config.gpuOperationsSource + ": NCCL cannot run several ranks on one GPU (" + sharing + ") in " +
                  where + "; use HOROVOD_GPU_OPERATIONS=HOST");
    }
    return GpuOperations::kNccl;
  }
  if (requested == GpuOperations::kHost) return GpuOperations::kHost;
  if (!ncclBackendBuilt()) {
    HVD_LOG(Debug) << where << ": GPU collectives staged through host memory (this build has no NCCL backend)";
    return GpuOperations::kHost;
  }
  if (!noNccl.empty() || !sharing.empty()) {
    HVD_LOG(Info) << where << ": GPU collectives staged through host memory, not NCCL: "
                  << (noNccl.empty() ? sharing : "NCCL could not be loaded on ranks " + rankList(noNccl));
    return GpuOperations::kHost;
  }
  return GpuOperations::kNccl;
}

}  // namespace hvd::cuda
