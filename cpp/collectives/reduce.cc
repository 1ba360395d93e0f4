// Local reduce and scale kernels. Each (dtype, op) pair gets plain elementwise loops over
// restrict-qualified pointers, compiled (-O3) into several ISA clones picked at load time
// (target_clones), so one binary vectorises with AVX-512, AVX2 or SSE2. float16/bfloat16 are
// converted in blocks to float32 on the stack, reduced there and converted back.
#include "collectives/reduce.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

#include "collectives/half.h"
#include "collectives/reduce_kernels.h"
#include "collectives/reduce_ops.h"
#include "common/check.h"

// Not under ThreadSanitizer: ifunc resolvers run before its runtime is initialised.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HVD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HVD_CLONES
#endif

namespace hvd {
namespace {

using namespace detail;
constexpr size_t kBlock = kHalfBlock;

// ---- Native-type loops -----------------------------------------------------------------------

template <typename T, typename Op>
HVD_CLONES void nativeTo3(T* __restrict dst, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
}
template <typename T, typename Op>
HVD_CLONES void nativeInto(T* __restrict dst, const T* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], src[i]);
}
template <typename T, typename Op>
HVD_CLONES void nativeIntoLeft(T* __restrict dst, const T* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(src[i], dst[i]);
}

template <typename T, typename Op>
void nativeIntoFn(void* dst, const void* src, size_t n) {
  nativeInto<T, Op>(static_cast<T*>(dst), static_cast<const T*>(src), n);
}
template <typename T, typename Op>
void nativeIntoLeftFn(void* dst, const void* src, size_t n) {
  nativeIntoLeft<T, Op>(static_cast<T*>(dst), static_cast<const T*>(src), n);
}
template <typename T, typename Op>
void nativeToFn(void* dst, const void* a, const void* b, size_t n) {
  if (dst == a) {
    nativeIntoFn<T, Op>(dst, b, n);
  } else if (dst == b) {
    nativeIntoLeftFn<T, Op>(dst, a, n);
  } else {
    nativeTo3<T, Op>(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), n);
  }
}

// ---- 16-bit floats through float32 (portable path) --------------------------------------

// dst = a OP b; dst may alias a or b (each block is read into scratch before it is written).
template <typename Cvt, typename Op>
HVD_CLONES void halfTo(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    const uint16_t* pa = a + base;
    const uint16_t* pb = b + base;
    for (size_t i = 0; i < m; ++i) fa[i] = Cvt::toFloat(pa[i]);
    for (size_t i = 0; i < m; ++i) fb[i] = Cvt::toFloat(pb[i]);
    uint16_t* pd = dst + base;
    for (size_t i = 0; i < m; ++i) pd[i] = Cvt::fromFloat(Op::apply(fa[i], fb[i]));
  }
}

template <typename Cvt, typename Op>
void halfToFn(void* dst, const void* a, const void* b, size_t n) {
  halfTo<Cvt, Op>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n);
}
template <typename Cvt, typename Op>
void halfIntoFn(void* dst, const void* src, size_t n) {
  halfToFn<Cvt, Op>(dst, dst, src, n);
}
template <typename Cvt, typename Op>
void halfIntoLeftFn(void* dst, const void* src, size_t n) {
  halfToFn<Cvt, Op>(dst, src, dst, n);
}

// ---- Kernel table ----------------------------------------------------------------------------

int opIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    default: return -1;
  }
}

template <DataType D, typename T, typename Op>
ReduceKernel nativeKernel() {
  return {&nativeToFn<T, Op>, &nativeIntoFn<T, Op>, &nativeIntoLeftFn<T, Op>,
          &blockToAndCopy<D, sizeof(T), &nativeToFn<T, Op>>, sizeof(T)};
}
template <DataType D, typename Cvt, typename Op>
ReduceKernel halfKernel() {
  return {&halfToFn<Cvt, Op>, &halfIntoFn<Cvt, Op>, &halfIntoLeftFn<Cvt, Op>, &blockToAndCopy<D, 2, &halfToFn<Cvt, Op>>,
          2};
}
template <DataType D, typename T>
std::array<ReduceKernel, 4> nativeKernels() {
  return {nativeKernel<D, T, SumOp>(), nativeKernel<D, T, MinOp>(), nativeKernel<D, T, MaxOp>(),
          nativeKernel<D, T, ProductOp>()};
}
template <DataType D, typename Cvt>
std::array<ReduceKernel, 4> halfKernels() {
  return {halfKernel<D, Cvt, SumOp>(), halfKernel<D, Cvt, MinOp>(), halfKernel<D, Cvt, MaxOp>(),
          halfKernel<D, Cvt, ProductOp>()};
}

using KernelTable = std::array<std::array<ReduceKernel, 4>, kNumDataTypes>;

KernelTable buildTable() {
  KernelTable t{};
  using enum DataType;
  t[static_cast<int>(kUInt8)] = nativeKernels<kUInt8, uint8_t>();
  t[static_cast<int>(kInt8)] = nativeKernels<kInt8, int8_t>();
  t[static_cast<int>(kUInt16)] = nativeKernels<kUInt16, uint16_t>();
  t[static_cast<int>(kInt16)] = nativeKernels<kInt16, int16_t>();
  t[static_cast<int>(kInt32)] = nativeKernels<kInt32, int32_t>();
  t[static_cast<int>(kInt64)] = nativeKernels<kInt64, int64_t>();
  t[static_cast<int>(kFloat16)] = halfKernels<kFloat16, HalfCvt>();
  t[static_cast<int>(kBFloat16)] = halfKernels<kBFloat16, Bf16Cvt>();
  t[static_cast<int>(kFloat32)] = nativeKernels<kFloat32, float>();
  t[static_cast<int>(kFloat64)] = nativeKernels<kFloat64, double>();
  // bool: Sum/Max = or, Min/Product = and.
  auto orKernel = nativeKernel<kBool, uint8_t, OrOp>();
  auto andKernel = nativeKernel<kBool, uint8_t, AndOp>();
  t[static_cast<int>(kBool)] = {orKernel, andKernel, orKernel, andKernel};
  return t;
}

// ---- Scaling ---------------------------------------------------------------------------------

template <typename T>
HVD_CLONES void scaleFloat(T* __restrict buf, size_t n, T factor) {
  for (size_t i = 0; i < n; ++i) buf[i] *= factor;
}

// Integers: multiply in double, truncate toward zero (C conversion).
template <typename T>
HVD_CLONES void scaleInteger(T* __restrict buf, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<T>(static_cast<int64_t>(static_cast<double>(buf[i]) * factor));
}

template <typename Cvt>
HVD_CLONES void scaleHalf(uint16_t* buf, size_t n, float factor) {
  alignas(64) float f[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    uint16_t* p = buf + base;
    for (size_t i = 0; i < m; ++i) f[i] = Cvt::toFloat(p[i]) * factor;
    for (size_t i = 0; i < m; ++i) p[i] = Cvt::fromFloat(f[i]);
  }
}

}  // namespace

namespace {

const ReduceKernel& lookup(const KernelTable& table, DataType dtype, ReduceOp op) {
  int index = opIndex(op);
  HVD_CHECK_AS(InvalidArgument, index >= 0)
      << "local reduction supports Sum, Min, Max and Product, not op " << static_cast<int>(op);
  int type = static_cast<int>(dtype);
  HVD_CHECK_AS(InvalidArgument, type >= 0 && type < kNumDataTypes) << "unknown dtype " << type;
  return table[type][index];
}

}  // namespace

const ReduceKernel& portableReduceKernel(DataType dtype, ReduceOp op) {
  static const KernelTable table = buildTable();
  return lookup(table, dtype, op);
}

const ReduceKernel& reduceKernel(DataType dtype, ReduceOp op) {
  static const KernelTable table = [] {
    KernelTable t = buildTable();
    if (cpuHasAvx2F16c()) {
      for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
        for (int op = 0; op < 4; ++op) t[static_cast<int>(type)][op] = avx2HalfKernel(type, op);
      }
      for (int op = 0; op < 4; ++op) t[static_cast<int>(DataType::kFloat32)][op].toAndCopy = avx2Float32ToAndCopy(op);
    }
    return t;
  }();
  return lookup(table, dtype, op);
}

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  reduceKernel(dtype, op).into(dst, src, count);
}

void reduceTo(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0) return;
  reduceKernel(dtype, op).to(dst, a, b, count);
}

void checkScalable(DataType dtype, double factor) {
  if (factor == 1.0) return;
  switch (dtype) {
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kBool:
      // As Horovod's CPU path: these types cannot be scaled (Average of them fails at execution).
      throw Error("Type " + std::string(dataTypeName(dtype)) + " not supported by ScaleBufferCPUImpl.");
    default: return;
  }
}

void scaleBuffer(void* buf, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  switch (dtype) {
    case DataType::kUInt8: return scaleInteger(static_cast<uint8_t*>(buf), count, factor);
    case DataType::kInt8: return scaleInteger(static_cast<int8_t*>(buf), count, factor);
    case DataType::kInt32: return scaleInteger(static_cast<int32_t*>(buf), count, factor);
    case DataType::kInt64: return scaleInteger(static_cast<int64_t*>(buf), count, factor);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      if (cpuHasAvx2F16c()) return avx2ScaleHalf(dtype, static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
      if (dtype == DataType::kFloat16) {
        return scaleHalf<HalfCvt>(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
      }
      return scaleHalf<Bf16Cvt>(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
    case DataType::kFloat32: return scaleFloat(static_cast<float*>(buf), count, static_cast<float>(factor));
    case DataType::kFloat64: return scaleFloat(static_cast<double*>(buf), count, factor);
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kBool: break;
  }
  checkScalable(dtype, factor);
}

float halfToFloat(uint16_t h) { return detail::halfBitsToFloat(h); }
uint16_t floatToHalf(float f) { return detail::floatToHalfBits(f); }
float bfloat16ToFloat(uint16_t b) { return detail::bfloat16BitsToFloat(b); }
uint16_t floatToBfloat16(float f) { return detail::floatToBfloat16Bits(f); }

}  // namespace hvd
