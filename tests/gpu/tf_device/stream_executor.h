// The SP_StreamExecutor of the stand-in GPU device: every callback TensorFlow makes on the device
// (memory, streams, events, copies, host waits), mapped onto the CUDA runtime table of
// cuda_table.h. SP_Stream and SP_Event values ARE the cudaStream_t / cudaEvent_t handles, so a
// kernel on this device can use TF_GetStream(ctx) as its cudaStream_t.
#pragma once

#include <cstdint>

#include "tensorflow/c/experimental/stream_executor/stream_executor.h"

namespace hvd_tf_standin {

// The memory each device reports (and its allocations may total at most): HVD_TF_STANDIN_GPU_MB
// MiB, default 512.
int64_t deviceMemoryBytes();

// Fills every callback of `se` (struct_size included).
void fillStreamExecutor(SP_StreamExecutor* se);

}  // namespace hvd_tf_standin
