// The part of TensorFlow's stable C API (tensorflow/c: kernels.h, ops.h, tf_tensor.h,
// tf_status.h) that the Horovod kernel library uses, declared here and resolved by name at load
// time from the libtensorflow_framework already loaded by the importing TensorFlow.
//
// Nothing is compiled against TensorFlow: the library builds without it and works with every
// TensorFlow version exporting these functions (2.16 through 2.21 checked). The types are
// opaque; the enum values are those of TensorFlow's C API (and of its error_codes.proto).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::tf {

struct TF_Status;
struct TF_Tensor;
struct TF_OpKernelConstruction;
struct TF_OpKernelContext;
struct TF_KernelBuilder;
struct TF_OpDefinitionBuilder;
struct TF_ShapeInferenceContext;
struct TF_ShapeHandle;
struct TF_AsyncOpKernelDoneCallback;
using TF_Bool = unsigned char;

// TF_DataType values.
enum TfDataType : int {
  kTfFloat = 1,
  kTfDouble = 2,
  kTfInt32 = 3,
  kTfUInt8 = 4,
  kTfInt16 = 5,
  kTfInt8 = 6,
  kTfInt64 = 9,
  kTfBool = 10,
  kTfBFloat16 = 14,
  kTfUInt16 = 17,
  kTfHalf = 19,
};

// TF_Code values.
enum TfCode : int {
  kTfOk = 0,
  kTfUnknown = 2,
  kTfInvalidArgument = 3,
  kTfDeadlineExceeded = 4,
  kTfFailedPrecondition = 9,
  kTfAborted = 10,
  kTfInternal = 13,
  kTfUnavailable = 14,
};

// Function pointers to the C API, filled by load().
struct TfApi {
  // tf_status.h
  TF_Status* (*NewStatus)();
  void (*DeleteStatus)(TF_Status*);
  void (*SetStatus)(TF_Status*, int code, const char* message);
  int (*GetCode)(const TF_Status*);
  const char* (*Message)(const TF_Status*);
  // tf_tensor.h
  TF_Tensor* (*NewTensor)(int dtype, const int64_t* dims, int numDims, void* data, size_t len,
                          void (*deallocator)(void* data, size_t len, void* arg), void* arg);
  void (*DeleteTensor)(TF_Tensor*);
  int (*TensorType)(const TF_Tensor*);
  int (*NumDims)(const TF_Tensor*);
  int64_t (*Dim)(const TF_Tensor*, int index);
  size_t (*TensorByteSize)(const TF_Tensor*);
  void* (*TensorData)(const TF_Tensor*);
  // ops.h
  TF_OpDefinitionBuilder* (*NewOpDefinitionBuilder)(const char* opName);
  void (*OpDefinitionBuilderAddAttr)(TF_OpDefinitionBuilder*, const char* spec);
  void (*OpDefinitionBuilderAddInput)(TF_OpDefinitionBuilder*, const char* spec);
  void (*OpDefinitionBuilderAddOutput)(TF_OpDefinitionBuilder*, const char* spec);
  void (*OpDefinitionBuilderSetIsStateful)(TF_OpDefinitionBuilder*, bool);
  void (*OpDefinitionBuilderSetShapeInferenceFunction)(TF_OpDefinitionBuilder*,
                                                       void (*fn)(TF_ShapeInferenceContext*,
                                                                  TF_Status*));
  void (*RegisterOpDefinition)(TF_OpDefinitionBuilder*, TF_Status*);
  int64_t (*ShapeInferenceContextNumInputs)(TF_ShapeInferenceContext*);
  TF_ShapeHandle* (*NewShapeHandle)();
  void (*DeleteShapeHandle)(TF_ShapeHandle*);
  void (*ShapeInferenceContextGetInput)(TF_ShapeInferenceContext*, int i, TF_ShapeHandle*,
                                        TF_Status*);
  void (*ShapeInferenceContextSetOutput)(TF_ShapeInferenceContext*, int i, TF_ShapeHandle*,
                                         TF_Status*);
  void (*ShapeInferenceContextSetUnknownShape)(TF_ShapeInferenceContext*, TF_Status*);
  // kernels.h
  TF_KernelBuilder* (*NewAsyncKernelBuilder)(const char* opName, const char* deviceName,
                                             void* (*create)(TF_OpKernelConstruction*),
                                             void (*computeAsync)(void*, TF_OpKernelContext*,
                                                                  TF_AsyncOpKernelDoneCallback*),
                                             void (*destroy)(void*));
  void (*RegisterKernelBuilder)(const char* kernelName, TF_KernelBuilder*, TF_Status*);
  void (*KernelBuilderHostMemory)(TF_KernelBuilder*, const char* argName);
  int (*GetDeviceId)(TF_OpKernelContext*);
  void (*RunAsyncOpKernelDoneCallback)(TF_AsyncOpKernelDoneCallback*);
  int (*NumInputs)(TF_OpKernelContext*);
  int (*NumOutputs)(TF_OpKernelContext*);
  void (*GetInput)(TF_OpKernelContext*, int i, TF_Tensor** tensor, TF_Status*);
  TF_Tensor* (*AllocateOutput)(TF_OpKernelContext*, int index, int dtype, const int64_t* dims,
                               int numDims, size_t len, TF_Status*);
  TF_Tensor* (*ForwardInputOrAllocateOutput)(TF_OpKernelContext*, const int* candidates,
                                             int numCandidates, int outputIndex,
                                             const int64_t* dims, int numDims, int* forwarded,
                                             TF_Status*);
  void (*SetOutput)(TF_OpKernelContext*, int i, const TF_Tensor*, TF_Status*);
  void (*OpKernelContextFailure)(TF_OpKernelContext*, TF_Status*);
  void (*OpKernelConstructionFailure)(TF_OpKernelConstruction*, TF_Status*);
  void (*GetAttrSize)(TF_OpKernelConstruction*, const char* name, int32_t* listSize,
                      int32_t* totalSize, TF_Status*);
  void (*GetAttrInt32)(TF_OpKernelConstruction*, const char* name, int32_t* value, TF_Status*);
  void (*GetAttrFloat)(TF_OpKernelConstruction*, const char* name, float* value, TF_Status*);
  void (*GetAttrBool)(TF_OpKernelConstruction*, const char* name, TF_Bool* value, TF_Status*);
  void (*GetAttrString)(TF_OpKernelConstruction*, const char* name, char* value, size_t maxLength,
                        TF_Status*);
};

// Resolves every entry from the loaded TensorFlow; on failure returns false and says which
// symbol is missing in `error`.
bool load(TfApi& api, std::string& error);

}  // namespace hvd::tf
