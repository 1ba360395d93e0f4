// Test-only entry points of the stand-in, beyond the CUDA runtime / NCCL / kernel tables. Nothing
// in the backend may call these: they exist so that the stand-in's own tests can check an error
// and carry on in the same process.
#pragma once

#define HVD_STANDIN_EXPORT __attribute__((visibility("default")))

extern "C" {

// Clears every device's sticky error and the calling thread's last error (a real CUDA context
// in error can only be destroyed; tests that provoke one on purpose reset it here).
HVD_STANDIN_EXPORT void hvd_standin_clear_errors(void);

}  // extern "C"
