// What the plugin remembers for tests (exported as hvd_tf_standin_gpu_* in test_hooks.cc): the
// streams TensorFlow created on each device, and the last asynchronous copy queued there. Tests
// use them to hold TensorFlow's own work back (the stand-in's hvd_standin_gate) and to find the
// memory a pending copy writes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hvd_tf_standin {

void noteStreamCreated(int device, cudaStream_t stream);
void noteStreamDestroyed(int device, cudaStream_t stream);
void noteCopyQueued(int device, void* dst, const void* src, uint64_t bytes);

}  // namespace hvd_tf_standin
