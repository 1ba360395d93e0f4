// float16 / bfloat16 kernels for CPUs with AVX2 and F16C, chosen at run time. Eight elements at
// a time are widened to float32 in registers, combined, and narrowed back: float16 with the F16C
// instructions, bfloat16 with integer shifts. Both round to nearest even and quiet NaNs exactly
// like the portable conversions in half.h, so every machine computes the same bits (up to which
// NaN payload a NaN result carries); the portable conversions handle the tails. Also float32's
// toAndCopy, which needs streaming stores straight from the registers that hold the result.
#include "collectives/reduce_ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HVD_AVX2_PATH 1
#define HVD_AVX2_TARGET __attribute__((target("avx2,f16c,fma")))
#endif

namespace hvd::detail {

#if HVD_AVX2_PATH
#pragma GCC diagnostic ignored "-Wpsabi"  // vector types below never cross a non-AVX ABI
namespace {

using Float8 = float __attribute__((vector_size(32)));

struct Fp16 {
  static constexpr DataType kType = DataType::kFloat16;
  HVD_AVX2_TARGET static Float8 load(const uint16_t* p) {
    return reinterpret_cast<Float8>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  HVD_AVX2_TARGET static void store(uint16_t* p, Float8 v) {
    __m128i h = _mm256_cvtps_ph(reinterpret_cast<__m256>(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static float toFloat(uint16_t v) { return halfBitsToFloat(v); }
  static uint16_t fromFloat(float v) { return floatToHalfBits(v); }
};

struct Bf16 {
  static constexpr DataType kType = DataType::kBFloat16;
  HVD_AVX2_TARGET static Float8 load(const uint16_t* p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return reinterpret_cast<Float8>(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  HVD_AVX2_TARGET static void store(uint16_t* p, Float8 v) {
    __m256i x = _mm256_castps_si256(reinterpret_cast<__m256>(v));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x0040));
    __m256i isNan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(0x7f800000));
    __m256i bits = _mm256_blendv_epi8(rounded, nan, isNan);  // every lane is <= 0xffff
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static float toFloat(uint16_t v) { return bfloat16BitsToFloat(v); }
  static uint16_t fromFloat(float v) { return floatToBfloat16Bits(v); }
};

// Vector forms of the operators in reduce_ops.h (same operand order and NaN rules).
struct VSum {
  HVD_AVX2_TARGET static Float8 apply(Float8 a, Float8 b) { return a + b; }
  using Scalar = SumOp;
};
struct VProduct {
  HVD_AVX2_TARGET static Float8 apply(Float8 a, Float8 b) { return a * b; }
  using Scalar = ProductOp;
};
struct VMin {
  HVD_AVX2_TARGET static Float8 apply(Float8 a, Float8 b) {
    Float8 r = b < a ? b : a;
    return b != b ? b : r;
  }
  using Scalar = MinOp;
};
struct VMax {
  HVD_AVX2_TARGET static Float8 apply(Float8 a, Float8 b) {
    Float8 r = b > a ? b : a;
    return b != b ? b : r;
  }
  using Scalar = MaxOp;
};

// dst = a OP b; dst may alias a or b exactly (each group of 8 is read before it is written).
template <typename Fmt, typename Op>
HVD_AVX2_TARGET void halfTo(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Fmt::store(dst + i, Op::apply(Fmt::load(a + i), Fmt::load(b + i)));
  for (; i < n; ++i) dst[i] = Fmt::fromFloat(Op::Scalar::apply(Fmt::toFloat(a[i]), Fmt::toFloat(b[i])));
}

template <typename Fmt, typename Op>
void toFn(void* dst, const void* a, const void* b, size_t n) {
  halfTo<Fmt, Op>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n);
}
template <typename Fmt, typename Op>
void intoFn(void* dst, const void* src, size_t n) {
  toFn<Fmt, Op>(dst, dst, src, n);
}
template <typename Fmt, typename Op>
void intoLeftFn(void* dst, const void* src, size_t n) {
  toFn<Fmt, Op>(dst, src, dst, n);
}

template <typename Fmt, typename Op>
ReduceKernel halfKernel() {
  return {&toFn<Fmt, Op>, &intoFn<Fmt, Op>, &intoLeftFn<Fmt, Op>, &blockToAndCopy<Fmt::kType, 2, &toFn<Fmt, Op>>, 2};
}

template <typename Fmt>
ReduceKernel kernelFor(int opIndex) {
  switch (opIndex) {
    case 0: return halfKernel<Fmt, VSum>();
    case 1: return halfKernel<Fmt, VMin>();
    case 2: return halfKernel<Fmt, VMax>();
    default: return halfKernel<Fmt, VProduct>();
  }
}

// float32 toAndCopy: each group of 8 is combined (and scaled) in a register and stored from
// there to both destinations; elements before `copy` reaches 32-byte alignment (streaming stores
// need it) and the tail go one at a time through the scalar operator (the same bits).
template <typename Op, bool kScale, bool kStream>
HVD_AVX2_TARGET void floatToAndCopy(float* dst, float* copy, const float* a, const float* b, size_t n,
                                    float factor) {
  const Float8 f = {factor, factor, factor, factor, factor, factor, factor, factor};
  auto scalar = [&](size_t i) {
    float v = Op::Scalar::apply(a[i], b[i]);
    if constexpr (kScale) v *= factor;
    dst[i] = v;
    copy[i] = v;
  };
  size_t i = 0;
  if constexpr (kStream) {
    for (; i < n && (reinterpret_cast<uintptr_t>(copy + i) & 31) != 0; ++i) scalar(i);
  }
  for (; i + 8 <= n; i += 8) {
    Float8 v = Op::apply(reinterpret_cast<Float8>(_mm256_loadu_ps(a + i)), reinterpret_cast<Float8>(_mm256_loadu_ps(b + i)));
    if constexpr (kScale) v = v * f;
    _mm256_storeu_ps(dst + i, reinterpret_cast<__m256>(v));
    if constexpr (kStream) {
      _mm256_stream_ps(copy + i, reinterpret_cast<__m256>(v));
    } else {
      _mm256_storeu_ps(copy + i, reinterpret_cast<__m256>(v));
    }
  }
  for (; i < n; ++i) scalar(i);
}

template <typename Op>
void floatToAndCopyFn(void* dst, void* copy, const void* a, const void* b, size_t n, double factor, bool stream) {
  auto* d = static_cast<float*>(dst);
  auto* c = static_cast<float*>(copy);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  const float f = static_cast<float>(factor);  // as scaleBuffer scales float32
  if (factor == 1.0) {
    stream ? floatToAndCopy<Op, false, true>(d, c, x, y, n, f) : floatToAndCopy<Op, false, false>(d, c, x, y, n, f);
  } else {
    stream ? floatToAndCopy<Op, true, true>(d, c, x, y, n, f) : floatToAndCopy<Op, true, false>(d, c, x, y, n, f);
  }
}

template <typename Fmt>
HVD_AVX2_TARGET void scale(uint16_t* buf, size_t n, float factor) {
  const Float8 f = {factor, factor, factor, factor, factor, factor, factor, factor};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Fmt::store(buf + i, Fmt::load(buf + i) * f);
  for (; i < n; ++i) buf[i] = Fmt::fromFloat(Fmt::toFloat(buf[i]) * factor);
}

}  // namespace

bool cpuHasAvx2F16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}

ReduceKernel avx2HalfKernel(DataType dtype, int opIndex) {
  return dtype == DataType::kFloat16 ? kernelFor<Fp16>(opIndex) : kernelFor<Bf16>(opIndex);
}

ToAndCopyFn avx2Float32ToAndCopy(int opIndex) {
  switch (opIndex) {
    case 0: return &floatToAndCopyFn<VSum>;
    case 1: return &floatToAndCopyFn<VMin>;
    case 2: return &floatToAndCopyFn<VMax>;
    default: return &floatToAndCopyFn<VProduct>;
  }
}

void avx2ScaleHalf(DataType dtype, uint16_t* buf, size_t n, float factor) {
  if (dtype == DataType::kFloat16) {
    scale<Fp16>(buf, n, factor);
  } else {
    scale<Bf16>(buf, n, factor);
  }
}

#else

bool cpuHasAvx2F16c() { return false; }
ReduceKernel avx2HalfKernel(DataType, int) { return {}; }
ToAndCopyFn avx2Float32ToAndCopy(int) { return nullptr; }
void avx2ScaleHalf(DataType, uint16_t*, size_t, float) {}

#endif

}  // namespace hvd::detail
