// float16 / bfloat16 kernels for CPUs with AVX2 and F16C, chosen at run time. Eight elements at
// a time are widened to float32 in registers, combined, and narrowed back: float16 with the F16C
// instructions, bfloat16 with integer shifts. Both round to nearest even and quiet NaNs exactly
// like the portable conversions in half.h, so every machine computes the same bits (up to which
// NaN payload a NaN result carries); the portable conversions handle the tails. toAndCopy for
// these and for float32 stores the result from the registers that hold it, streaming or not.
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

// The formats toAndCopy and the 16-bit kernels work in: eight elements widened to float32 in a
// register (widen/load) and narrowed back (narrow/store), stored plain or streaming.
struct Fp16 {
  using Elem = uint16_t;
  using Packed = __m128i;
  HVD_AVX2_TARGET static Float8 widen(__m128i h) { return reinterpret_cast<Float8>(_mm256_cvtph_ps(h)); }
  HVD_AVX2_TARGET static __m128i narrow(Float8 v) {
    return _mm256_cvtps_ph(reinterpret_cast<__m256>(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  HVD_AVX2_TARGET static Float8 load(const uint16_t* p) { return widen(loadPacked(p)); }
  HVD_AVX2_TARGET static void store(uint16_t* p, Float8 v) { storePacked(p, narrow(v)); }
  HVD_AVX2_TARGET static __m128i loadPacked(const uint16_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  HVD_AVX2_TARGET static void storePacked(uint16_t* p, __m128i h) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  HVD_AVX2_TARGET static void streamPacked(uint16_t* p, __m128i h) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static constexpr uintptr_t kStreamAlign = 16;
  static float toFloat(uint16_t v) { return halfBitsToFloat(v); }
  static uint16_t fromFloat(float v) { return floatToHalfBits(v); }
};

struct Bf16 {
  using Elem = uint16_t;
  using Packed = __m128i;
  HVD_AVX2_TARGET static Float8 widen(__m128i h) {
    __m256i wide = _mm256_cvtepu16_epi32(h);
    return reinterpret_cast<Float8>(_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  HVD_AVX2_TARGET static __m128i narrow(Float8 v) {
    __m256i x = _mm256_castps_si256(reinterpret_cast<__m256>(v));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x0040));
    __m256i isNan =
        _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i bits = _mm256_blendv_epi8(rounded, nan, isNan);  // every lane is <= 0xffff
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    return _mm256_castsi256_si128(packed);
  }
  HVD_AVX2_TARGET static Float8 load(const uint16_t* p) { return widen(Fp16::loadPacked(p)); }
  HVD_AVX2_TARGET static void store(uint16_t* p, Float8 v) { Fp16::storePacked(p, narrow(v)); }
  HVD_AVX2_TARGET static void storePacked(uint16_t* p, __m128i h) { Fp16::storePacked(p, h); }
  HVD_AVX2_TARGET static void streamPacked(uint16_t* p, __m128i h) { Fp16::streamPacked(p, h); }
  static constexpr uintptr_t kStreamAlign = 16;
  static float toFloat(uint16_t v) { return bfloat16BitsToFloat(v); }
  static uint16_t fromFloat(float v) { return floatToBfloat16Bits(v); }
};

// float32 itself: widening and narrowing are nothing.
struct Fp32 {
  using Elem = float;
  using Packed = __m256;
  HVD_AVX2_TARGET static Float8 widen(__m256 v) { return reinterpret_cast<Float8>(v); }
  HVD_AVX2_TARGET static __m256 narrow(Float8 v) { return reinterpret_cast<__m256>(v); }
  HVD_AVX2_TARGET static Float8 load(const float* p) { return widen(_mm256_loadu_ps(p)); }
  HVD_AVX2_TARGET static void storePacked(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  HVD_AVX2_TARGET static void streamPacked(float* p, __m256 v) { _mm256_stream_ps(p, v); }
  static constexpr uintptr_t kStreamAlign = 32;
  static float toFloat(float v) { return v; }
  static float fromFloat(float v) { return v; }
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

// toAndCopy: each group of 8 is combined (and scaled) in a register and stored from there to
// both destinations; elements before `copy` reaches the alignment streaming stores need, and the
// tail, go one at a time through the scalar operator. Scaling narrows first, as scaleBuffer()
// scales the stored result: the same bits as to() then scaleBuffer().
template <typename Fmt, typename Op, bool kScale, bool kStream>
HVD_AVX2_TARGET void toAndCopy8(typename Fmt::Elem* dst, typename Fmt::Elem* copy, const typename Fmt::Elem* a,
                                const typename Fmt::Elem* b, size_t n, float factor) {
  const Float8 f = {factor, factor, factor, factor, factor, factor, factor, factor};
  auto scalar = [&](size_t i) {
    auto v = Fmt::fromFloat(Op::Scalar::apply(Fmt::toFloat(a[i]), Fmt::toFloat(b[i])));
    if constexpr (kScale) v = Fmt::fromFloat(Fmt::toFloat(v) * factor);
    dst[i] = v;
    copy[i] = v;
  };
  size_t i = 0;
  if constexpr (kStream) {
    for (; i < n && (reinterpret_cast<uintptr_t>(copy + i) % Fmt::kStreamAlign) != 0; ++i) scalar(i);
  }
  for (; i + 8 <= n; i += 8) {
    typename Fmt::Packed p = Fmt::narrow(Op::apply(Fmt::load(a + i), Fmt::load(b + i)));
    if constexpr (kScale) p = Fmt::narrow(Fmt::widen(p) * f);
    Fmt::storePacked(dst + i, p);
    if constexpr (kStream) {
      Fmt::streamPacked(copy + i, p);
    } else {
      Fmt::storePacked(copy + i, p);
    }
  }
  for (; i < n; ++i) scalar(i);
}

template <typename Fmt, typename Op>
void toAndCopyFn(void* dst, void* copy, const void* a, const void* b, size_t n, double factor, bool stream) {
  using E = typename Fmt::Elem;
  auto* d = static_cast<E*>(dst);
  auto* c = static_cast<E*>(copy);
  const auto* x = static_cast<const E*>(a);
  const auto* y = static_cast<const E*>(b);
  const float f = static_cast<float>(factor);  // as scaleBuffer scales float32 and 16-bit floats
  if (factor == 1.0) {
    stream ? toAndCopy8<Fmt, Op, false, true>(d, c, x, y, n, f) : toAndCopy8<Fmt, Op, false, false>(d, c, x, y, n, f);
  } else {
    stream ? toAndCopy8<Fmt, Op, true, true>(d, c, x, y, n, f) : toAndCopy8<Fmt, Op, true, false>(d, c, x, y, n, f);
  }
}

template <typename Fmt, typename Op>
ReduceKernel halfKernel() {
  return {&toFn<Fmt, Op>, &intoFn<Fmt, Op>, &intoLeftFn<Fmt, Op>, &toAndCopyFn<Fmt, Op>, 2};
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
    case 0: return &toAndCopyFn<Fp32, VSum>;
    case 1: return &toAndCopyFn<Fp32, VMin>;
    case 2: return &toAndCopyFn<Fp32, VMax>;
    default: return &toAndCopyFn<Fp32, VProduct>;
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
