#include "tf_c_api.h"

#include <dlfcn.h>

namespace hvd::tf {
namespace {

// TensorFlow's framework library, already loaded by `import tensorflow` (RTLD_NOLOAD: never
// loads a second copy). Falls back to the global namespace for builds that link it statically.
void* frameworkHandle() {
  for (const char* name : {"libtensorflow_framework.so.2", "libtensorflow_framework.so"}) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return handle;
  }
  return RTLD_DEFAULT;
}

template <typename Fn>
bool resolve(void* handle, Fn& slot, const char* symbol, std::string& error) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr && handle != RTLD_DEFAULT) address = dlsym(RTLD_DEFAULT, symbol);
  if (address == nullptr) {
    if (error.empty()) error = std::string("TensorFlow does not export ") + symbol;
    return false;
  }
  slot = reinterpret_cast<Fn>(address);
  return true;
}

}  // namespace

bool load(TfApi& api, std::string& error) {
  void* h = frameworkHandle();
  bool ok = true;
#define HVD_TF_RESOLVE(field, symbol) ok = resolve(h, api.field, #symbol, error) && ok
  HVD_TF_RESOLVE(NewStatus, TF_NewStatus);
  HVD_TF_RESOLVE(DeleteStatus, TF_DeleteStatus);
  HVD_TF_RESOLVE(SetStatus, TF_SetStatus);
  HVD_TF_RESOLVE(GetCode, TF_GetCode);
  HVD_TF_RESOLVE(Message, TF_Message);
  HVD_TF_RESOLVE(NewTensor, TF_NewTensor);
  HVD_TF_RESOLVE(DeleteTensor, TF_DeleteTensor);
  HVD_TF_RESOLVE(TensorType, TF_TensorType);
  HVD_TF_RESOLVE(NumDims, TF_NumDims);
  HVD_TF_RESOLVE(Dim, TF_Dim);
  HVD_TF_RESOLVE(TensorByteSize, TF_TensorByteSize);
  HVD_TF_RESOLVE(TensorData, TF_TensorData);
  HVD_TF_RESOLVE(NewOpDefinitionBuilder, TF_NewOpDefinitionBuilder);
  HVD_TF_RESOLVE(OpDefinitionBuilderAddAttr, TF_OpDefinitionBuilderAddAttr);
  HVD_TF_RESOLVE(OpDefinitionBuilderAddInput, TF_OpDefinitionBuilderAddInput);
  HVD_TF_RESOLVE(OpDefinitionBuilderAddOutput, TF_OpDefinitionBuilderAddOutput);
  HVD_TF_RESOLVE(OpDefinitionBuilderSetIsStateful, TF_OpDefinitionBuilderSetIsStateful);
  HVD_TF_RESOLVE(OpDefinitionBuilderSetShapeInferenceFunction,
                 TF_OpDefinitionBuilderSetShapeInferenceFunction);
  HVD_TF_RESOLVE(RegisterOpDefinition, TF_RegisterOpDefinition);
  HVD_TF_RESOLVE(ShapeInferenceContextNumInputs, TF_ShapeInferenceContextNumInputs);
  HVD_TF_RESOLVE(NewShapeHandle, TF_NewShapeHandle);
  HVD_TF_RESOLVE(DeleteShapeHandle, TF_DeleteShapeHandle);
  HVD_TF_RESOLVE(ShapeInferenceContextGetInput, TF_ShapeInferenceContextGetInput);
  HVD_TF_RESOLVE(ShapeInferenceContextSetOutput, TF_ShapeInferenceContextSetOutput);
  HVD_TF_RESOLVE(ShapeInferenceContextSetUnknownShape, TF_ShapeInferenceContextSetUnknownShape);
  HVD_TF_RESOLVE(NewAsyncKernelBuilder, TF_NewAsyncKernelBuilder);
  HVD_TF_RESOLVE(RegisterKernelBuilder, TF_RegisterKernelBuilder);
  HVD_TF_RESOLVE(KernelBuilderHostMemory, TF_KernelBuilder_HostMemory);
  HVD_TF_RESOLVE(GetDeviceId, TF_GetDeviceId);
  HVD_TF_RESOLVE(RunAsyncOpKernelDoneCallback, TF_RunAsyncOpKernelDoneCallback);
  HVD_TF_RESOLVE(NumInputs, TF_NumInputs);
  HVD_TF_RESOLVE(NumOutputs, TF_NumOutputs);
  HVD_TF_RESOLVE(GetInput, TF_GetInput);
  HVD_TF_RESOLVE(AllocateOutput, TF_AllocateOutput);
  HVD_TF_RESOLVE(ForwardInputOrAllocateOutput, TF_ForwardInputOrAllocateOutput);
  HVD_TF_RESOLVE(SetOutput, TF_SetOutput);
  HVD_TF_RESOLVE(OpKernelContextFailure, TF_OpKernelContext_Failure);
  HVD_TF_RESOLVE(OpKernelConstructionFailure, TF_OpKernelConstruction_Failure);
  HVD_TF_RESOLVE(GetAttrSize, TF_OpKernelConstruction_GetAttrSize);
  HVD_TF_RESOLVE(GetAttrInt32, TF_OpKernelConstruction_GetAttrInt32);
  HVD_TF_RESOLVE(GetAttrFloat, TF_OpKernelConstruction_GetAttrFloat);
  HVD_TF_RESOLVE(GetAttrBool, TF_OpKernelConstruction_GetAttrBool);
  HVD_TF_RESOLVE(GetAttrString, TF_OpKernelConstruction_GetAttrString);
#undef HVD_TF_RESOLVE
  return ok;
}

}  // namespace hvd::tf
