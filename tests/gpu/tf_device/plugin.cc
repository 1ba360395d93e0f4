// SE_InitPlugin: registers the stand-in GPU device with TensorFlow's PluggableDevice mechanism.
// Device type "GPU" (free in a TensorFlow built without CUDA), one device per CUDA device of
// HOROVOD_CUDA_LIBRARY (the stand-in's HVD_STANDIN_DEVICES), platform name HVD_STANDIN.
#include <cstdio>
#include <string>

#include "cuda_table.h"
#include "stream_executor.h"

namespace hvd_tf_standin {
namespace {

constexpr char kPlatformName[] = "HVD_STANDIN";
constexpr char kDeviceType[] = "GPU";

void getDeviceCount(const SP_Platform*, int* count, TF_Status* status) {
  *count = 0;
  cudaError_t e = cuda().getDeviceCount(count);
  if (e != cudaSuccess) {
    std::string message = std::string("stand-in GPU: cudaGetDeviceCount failed: ") + cuda().getErrorString(e);
    TF_SetStatus(status, TF_FAILED_PRECONDITION, message.c_str());
    return;
  }
  TF_SetStatus(status, TF_OK, "");
}

void createDevice(const SP_Platform*, SE_CreateDeviceParams* params, TF_Status* status) {
  SP_Device* device = params->device;
  device->struct_size = SP_DEVICE_STRUCT_SIZE;
  device->ordinal = params->ordinal;
  device->device_handle = nullptr;
  device->hardware_name = "Horovod CUDA stand-in (host memory)";
  device->device_vendor = "Horovod tests";
  device->pci_bus_id = nullptr;
  TF_SetStatus(status, TF_OK, "");
}

void destroyDevice(const SP_Platform*, SP_Device*) {}

int32_t numaNode(const SP_Device*) { return -1; }

void createDeviceFns(const SP_Platform*, SE_CreateDeviceFnsParams* params, TF_Status* status) {
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  params->device_fns->get_numa_node = numaNode;
  params->device_fns->get_memory_bandwidth = nullptr;  // optional: "unset"
  params->device_fns->get_gflops = nullptr;
  TF_SetStatus(status, TF_OK, "");
}

void destroyDeviceFns(const SP_Platform*, SP_DeviceFns*) {}

void createStreamExecutor(const SP_Platform*, SE_CreateStreamExecutorParams* params, TF_Status* status) {
  fillStreamExecutor(params->stream_executor);
  TF_SetStatus(status, TF_OK, "");
}

void destroyStreamExecutor(const SP_Platform*, SP_StreamExecutor*) {}

uint64_t timerNanoseconds(SP_Timer) { return 0; }  // never reached: creating a timer fails

void createTimerFns(const SP_Platform*, SP_TimerFns* timer_fns, TF_Status* status) {
  timer_fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer_fns->nanoseconds = timerNanoseconds;
  TF_SetStatus(status, TF_OK, "");
}

void destroyTimerFns(const SP_Platform*, SP_TimerFns*) {}
void destroyPlatform(SP_Platform*) {}
void destroyPlatformFns(SP_PlatformFns*) {}

}  // namespace
}  // namespace hvd_tf_standin

extern "C" __attribute__((visibility("default"))) void SE_InitPlugin(SE_PlatformRegistrationParams* params,
                                                                     TF_Status* status) {
  using namespace hvd_tf_standin;
  std::string error = loadCuda();
  if (!error.empty()) {
    error = "the Horovod stand-in GPU plugin cannot start: " + error;
    TF_SetStatus(status, TF_FAILED_PRECONDITION, error.c_str());
    return;
  }
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  SP_Platform* platform = params->platform;
  platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  platform->name = kPlatformName;
  platform->type = kDeviceType;
  platform->supports_unified_memory = false;
  platform->use_bfc_allocator = true;     // as TensorFlow's CUDA device
  platform->force_memory_growth = true;   // the BFC grows in steps instead of taking the whole device
  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->get_device_count = getDeviceCount;
  fns->create_device = createDevice;
  fns->destroy_device = destroyDevice;
  fns->create_device_fns = createDeviceFns;
  fns->destroy_device_fns = destroyDeviceFns;
  fns->create_stream_executor = createStreamExecutor;
  fns->destroy_stream_executor = destroyStreamExecutor;
  fns->create_timer_fns = createTimerFns;
  fns->destroy_timer_fns = destroyTimerFns;
  params->destroy_platform = destroyPlatform;
  params->destroy_platform_fns = destroyPlatformFns;
  TF_SetStatus(status, TF_OK, "");
}
