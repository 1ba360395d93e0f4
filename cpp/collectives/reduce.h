// Local reduce and scale kernels, per dtype, written so the compiler vectorises them; the hot
// loops are compiled for several ISAs with runtime dispatch (function multiversioning), never
// -march=native. float16 and bfloat16 are reduced through float32.
#pragma once

#include <cstddef>

#include "horovod/types.h"

namespace hvd {

// dst[i] = dst[i] OP src[i] for i < count. op in {kSum, kMin, kMax, kProduct}.
// For bool: Sum/Max = or, Min/Product = and.
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// dst[i] = a[i] OP b[i] (dst may alias a or b).
void reduceTo(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor. Integers are scaled in double and truncated toward zero; float16/bfloat16 in
// float32; float32/float64 in their own precision. factor == 1 is a no-op. As in Horovod's CPU
// path, uint16, int16 and bool cannot be scaled: any other factor throws hvd::Error
// ("Type uint16 not supported by ScaleBufferCPUImpl.").
void scaleBuffer(void* buf, size_t count, DataType dtype, double factor);
// Throws scaleBuffer's error when it would refuse `factor` for `dtype` (whatever the count).
void checkScalable(DataType dtype, double factor);

// Conversions used by kernels and tests.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace hvd
