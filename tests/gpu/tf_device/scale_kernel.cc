// TF_InitKernel: the plugin's one GPU kernel, HvdStandinGpuScale (y = x * factor), so that tests
// have a TensorFlow GPU op whose result is produced on TensorFlow's compute stream and ordered by
// that stream only (TensorFlow's own copies are waited for on the host before their consumers
// run; a kernel's output is not). It queues the stand-in's `scale` kernel (hvd_cuda_kernels_v1)
// on TF_GetStream(ctx) and returns: the output is ready for TensorFlow as soon as it is queued.
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_table.h"
#include "horovod/types.h"
#include "registry.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"

namespace hvd_tf_standin {
namespace {

constexpr char kOpName[] = "HvdStandinGpuScale";

struct ScaleKernel {
  float factor = 1.0f;
};

bool hvdType(TF_DataType type, hvd::DataType* out) {
  switch (type) {
    case TF_FLOAT: *out = hvd::DataType::kFloat32; return true;
    case TF_DOUBLE: *out = hvd::DataType::kFloat64; return true;
    case TF_HALF: *out = hvd::DataType::kFloat16; return true;
    case TF_BFLOAT16: *out = hvd::DataType::kBFloat16; return true;
    default: return false;
  }
}

void sameShape(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* shape = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, 0, shape, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 0, shape, status);
  TF_DeleteShapeHandle(shape);
}

void* create(TF_OpKernelConstruction* ctx) {
  auto* kernel = new ScaleKernel();
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrFloat(ctx, "factor", &kernel->factor, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return kernel;
}

void destroy(void* kernel) { delete static_cast<ScaleKernel*>(kernel); }

void fail(TF_OpKernelContext* ctx, TF_Code code, const std::string& message) {
  TF_Status* status = TF_NewStatus();
  TF_SetStatus(status, code, message.c_str());
  TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
}

void compute(void* kernel, TF_OpKernelContext* ctx) {
  const float factor = static_cast<ScaleKernel*>(kernel)->factor;
  TF_Status* status = TF_NewStatus();
  TF_Tensor* in = nullptr;
  TF_Tensor* out = nullptr;
  TF_GetInput(ctx, 0, &in, status);
  if (TF_GetCode(status) == TF_OK) {
    std::vector<int64_t> dims(static_cast<size_t>(TF_NumDims(in)));
    for (int i = 0; i < TF_NumDims(in); ++i) dims[static_cast<size_t>(i)] = TF_Dim(in, i);
    out = TF_AllocateOutput(ctx, 0, TF_TensorType(in), dims.data(), static_cast<int>(dims.size()),
                            TF_TensorByteSize(in), status);
  }
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, status);
  } else if (TF_TensorElementCount(in) > 0) {
    hvd::DataType type{};
    SP_Stream stream = TF_GetStream(ctx, status);
    if (TF_GetCode(status) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, status);
    } else if (!hvdType(TF_TensorType(in), &type)) {
      fail(ctx, TF_INVALID_ARGUMENT, std::string(kOpName) + ": unsupported dtype");
    } else if (cudaError_t set = cuda().setDevice(TF_GetDeviceId(ctx))) {  // a launch runs on the current device
      fail(ctx, TF_INTERNAL, std::string(kOpName) + ": cudaSetDevice failed: " + cuda().getErrorString(set));
    } else {
      cudaError_t e = cuda().kernels->scale(TF_TensorData(out), TF_TensorData(in), TF_TensorElementCount(in),
                                            static_cast<int>(type), factor, reinterpret_cast<cudaStream_t>(stream));
      if (e != cudaSuccess)
        fail(ctx, TF_INTERNAL, std::string(kOpName) + ": the scale kernel failed: " + cuda().getErrorString(e));
      else noteScaleQueued(TF_GetDeviceId(ctx), TF_TensorData(out), TF_TensorByteSize(out));
    }
  }
  TF_DeleteTensor(in);
  TF_DeleteTensor(out);
  TF_DeleteStatus(status);
}

}  // namespace
}  // namespace hvd_tf_standin

// Called by TensorFlow after SE_InitPlugin succeeded (the CUDA table is loaded).
extern "C" __attribute__((visibility("default"))) void TF_InitKernel() {
  using namespace hvd_tf_standin;
  if (cuda().kernels == nullptr) {
    std::fprintf(stderr, "hvd-tf-standin-gpu: %s is not registered: %s lacks hvd_cuda_kernels_v1\n", kOpName,
                 cuda().path.c_str());
    return;
  }
  TF_Status* status = TF_NewStatus();
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder(kOpName);
  TF_OpDefinitionBuilderAddInput(op, "x: T");
  TF_OpDefinitionBuilderAddOutput(op, "y: T");
  TF_OpDefinitionBuilderAddAttr(op, "T: {float, double, half, bfloat16}");
  TF_OpDefinitionBuilderAddAttr(op, "factor: float");
  TF_OpDefinitionBuilderSetShapeInferenceFunction(op, sameShape);
  TF_RegisterOpDefinition(op, status);
  if (TF_GetCode(status) == TF_OK) {
    TF_KernelBuilder* builder = TF_NewKernelBuilder(kOpName, "GPU", create, compute, destroy);
    TF_RegisterKernelBuilder(kOpName, builder, status);  // takes ownership of `builder`
  }
  if (TF_GetCode(status) != TF_OK)
    std::fprintf(stderr, "hvd-tf-standin-gpu: registering %s failed: %s\n", kOpName, TF_Message(status));
  TF_DeleteStatus(status);
}
