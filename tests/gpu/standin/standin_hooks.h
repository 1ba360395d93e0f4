// Test-only entry points of the stand-in, beyond the CUDA runtime / NCCL / kernel tables. Nothing
// in the backend may call these: they exist so that the stand-in's own tests can check an error
// and carry on in the same process.
#pragma once

#include <cuda_runtime_api.h>

#define HVD_STANDIN_EXPORT __attribute__((visibility("default")))

extern "C" {

// Clears every device's sticky error and the calling thread's last error (a real CUDA context
// in error can only be destroyed; tests that provoke one on purpose reset it here).
HVD_STANDIN_EXPORT void hvd_standin_clear_errors(void);

// Queues on `stream` an op that blocks the stream until hvd_standin_open_gate(gate) (what a slow
// kernel would do), so tests can observe work that has not run yet. Returns null (and prints why)
// when `stream` is not a usable stream.
typedef struct HvdStandinGate HvdStandinGate;
HVD_STANDIN_EXPORT HvdStandinGate* hvd_standin_gate(cudaStream_t stream);
HVD_STANDIN_EXPORT void hvd_standin_open_gate(HvdStandinGate* gate);

// What cudaLaunchHostFunc does, for a device built over the stand-in (tests/gpu/tf_device):
// queues on `stream` a call of fn(arg), run on the stream's thread after the work queued before
// it; later work on the stream waits for it to return. When it starts, the host counts as having
// observed everything before it on the stream (the function is host code; what it signals to
// other threads is ordered after that work). fn must not synchronize with its own stream. Returns
// the queuing status (an invalid stream, the device's sticky error).
HVD_STANDIN_EXPORT cudaError_t hvd_standin_launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* arg);

// How many host threads are blocked right now in cudaStreamSynchronize, cudaEventSynchronize or
// cudaDeviceSynchronize on work of `device` (0 for a device that does not exist). With a stream
// gated, a test learns from it, without a timer, that some code is waiting for the gated work.
HVD_STANDIN_EXPORT int hvd_standin_host_waiters(int device);

}  // extern "C"
