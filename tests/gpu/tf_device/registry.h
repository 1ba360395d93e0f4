// What the plugin remembers: the streams TensorFlow created on each device (a stream's device, for
// dependencies between streams of two devices), the last asynchronous copy queued on each, and
// the last output of its HvdStandinGpuScale kernel.
// Tests read both through the hvd_tf_standin_gpu_* exports of registry.cc, to hold TensorFlow's
// own work back (the stand-in's hvd_standin_gate) and to find the memory a pending copy writes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hvd_tf_standin {

void noteStreamCreated(int device, cudaStream_t stream);
void noteStreamDestroyed(int device, cudaStream_t stream);
// The device `stream` was created on, or -1 if it is not a live stream of the plugin.
int streamDevice(cudaStream_t stream);
void noteCopyQueued(int device, void* dst, const void* src, uint64_t bytes);
void noteScaleQueued(int device, void* out, uint64_t bytes);  // HvdStandinGpuScale's output

}  // namespace hvd_tf_standin
