// Which implementation runs a process set's GPU collectives: NCCL or host-staged. The settings
// (HOROVOD_GPU_OPERATIONS and the per-op variables) are read into engine::Config::gpuOperations;
// this file checks them at init and turns them, with what each rank can do, into one choice that
// every rank of the set makes alike.
//
// The cuda_staged factory ranks above the NCCL one (BackendFactory::priority): asked first for a
// (set, device), it calls agreeGpuOperations() and builds the host-staged backend, or declines
// when the set agreed on NCCL, and only then is the NCCL factory asked. The NCCL factory may call
// it too (it answers alike on every rank). It is a collective over the set's host transport,
// which is safe there: every member builds the backend for a response at the same point of the
// response order.
//
// Engine thread (agreeGpuOperations) / init (checkGpuOperations).
#pragma once

#include <string>

#include "engine/backend.h"
#include "engine/config.h"

namespace hvd::cuda {

// The names the two backends register under.
inline constexpr const char kNcclBackendName[] = "nccl";
inline constexpr const char kStagedBackendName[] = "cuda_staged";

// Init check (BackendFactory::checkConfig): HOROVOD_GPU_OPERATIONS=NCCL (or a per-op variable) on
// a process that cannot load NCCL, or in a build without the NCCL backend, throws InvalidArgument
// naming the variable and what the loader searched. Loads the CUDA libraries only in that case.
void checkGpuOperations(const engine::Config& config);

// The implementation for context.device on context.set, the same on every member (never kAuto):
//   - every member must have loaded the CUDA runtime, else Error naming those that could not;
//   - the settings must be equal on every member (HOROVOD_GPU_OPERATIONS, ...,
//     HOROVOD_GPU_STAGED_CHUNK_BYTES), else Error naming the ranks that differ;
//   - NCCL when asked for, or by default when the NCCL backend is built, every member can load
//     NCCL and no two members use one GPU (NCCL cannot put two ranks on one device);
//   - NCCL asked for where a member cannot load it or two members share a GPU: Error naming them;
//   - otherwise HOST.
// Members on one GPU are found by (host, GPU): the GPU is CUDA_VISIBLE_DEVICES' entry for
// the device ordinal when that variable is set, else the ordinal.
engine::GpuOperations agreeGpuOperations(const engine::BackendContext& context);

}  // namespace hvd::cuda
