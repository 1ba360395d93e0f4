#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <type_traits>

#include "collectives/reduce.h"
#include "collectives/reduce_kernels.h"
#include "collectives/reduce_ops.h"
#include "collectives/stream_copy.h"
#include "horovod/errors.h"
#include "test_data.h"

namespace hvd::test {
namespace {

// Independent decoder: value of a binary16 from its fields.
double decodeHalf(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    v = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return sign ? -v : v;
}

// "" when the first n elements of u and v have the same bits or are both NaN (which payload a
// NaN result carries may differ: the compiler may swap the operands of a commutative add or
// multiply), else the first element that differs.
std::string sameBitsButNaNPayload(DataType t, const void* u, const void* v, size_t n) {
  const size_t e = dataTypeSize(t);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(loadFloat(t, u, i)) && std::isnan(loadFloat(t, v, i))) continue;
    if (std::memcmp(static_cast<const uint8_t*>(u) + i * e, static_cast<const uint8_t*>(v) + i * e, e) != 0) {
      return "element " + std::to_string(i);
    }
  }
  return "";
}

// `count` random bit patterns of T (16 or 32 bits), with the `specials` laid over every
// `stride`-th element, starting from special number `first`.
template <typename T, size_t K>
std::vector<T> randomWithSpecials(std::mt19937& rng, size_t count, const T (&specials)[K], size_t stride,
                                  size_t first) {
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
  std::vector<T> v(count);
  for (T& x : v) x = std::bit_cast<T>(static_cast<Bits>(rng()));
  for (size_t i = 0; i < count; i += stride) v[i] = specials[(i / stride + first) % K];
  return v;
}

TEST(HalfConversion, DecodesEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    double expected = decodeHalf(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(HalfConversion, RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t back = floatToHalf(halfToFloat(static_cast<uint16_t>(h)));
    if (std::isnan(decodeHalf(static_cast<uint16_t>(h)))) {
      ASSERT_EQ(back & 0x7e00, 0x7e00) << h;  // still a (quiet) NaN
      ASSERT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      ASSERT_EQ(back, h) << h;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own float -> _Float16 conversion (correctly rounded) is the reference.
TEST(HalfConversion, RoundsLikeTheCompiler) {
  auto check = [](uint32_t bits) {
    float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) return;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t expected = std::bit_cast<uint16_t>(h);
    ASSERT_EQ(floatToHalf(f), expected) << std::hex << bits << " " << f;
  };
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 977) check(static_cast<uint32_t>(bits));
  // Ties and boundaries: every float with 13 dropped bits equal to 0x1000 (exact ties), +-1.
  for (uint32_t e = 100; e < 145; ++e) {
    for (uint32_t m = 0; m < (1u << 10); m += 3) {
      uint32_t base = (e << 23) | (m << 13);
      for (uint32_t low : {0x0fffu, 0x1000u, 0x1001u, 0x0u, 0x1fffu}) {
        check(base | low);
        check((base | low) | 0x80000000u);
      }
    }
  }
}
#endif

TEST(HalfConversion, SpecialValues) {
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // tie rounds to even = overflow
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even (2)
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even (1.0)
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  uint16_t nan = floatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A signalling NaN whose payload sits only in the dropped bits must stay a NaN.
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_EQ(halfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
}

// Reference bfloat16 rounding: pick the nearer of the two neighbours, ties to even.
uint16_t referenceBf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint16_t lower = static_cast<uint16_t>(bits >> 16);
  if ((bits & 0xffff) == 0) return lower;
  uint16_t upper = static_cast<uint16_t>(lower + 1);
  double x = f, a = bfloat16ToFloat(lower), b = bfloat16ToFloat(upper);
  if (std::isinf(b)) b = std::copysign(std::ldexp(1.0, 128), x);  // the value after max
  double da = std::fabs(x - a), db = std::fabs(x - b);
  if (da < db) return lower;
  if (db < da) return upper;
  return (lower & 1) ? upper : lower;
}

TEST(Bfloat16Conversion, RoundsToNearestEven) {
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 1013) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(f))));
      continue;
    }
    ASSERT_EQ(floatToBfloat16(f), referenceBf16(f)) << std::hex << bits;
  }
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBfloat16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(floatToBfloat16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to Inf
  EXPECT_EQ(floatToBfloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  // NaN with payload only in the low bits stays NaN (does not round to Inf).
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(std::bit_cast<float>(0x7f800001u)))));
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bfloat16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(floatToBfloat16(f), b);
    }
  }
}

// Every kernel form against the scalar reference, with lengths around the vector and block sizes.
TEST(ReduceKernels, AllTypesOpsAndForms) {
  for (DataType t : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      const ReduceKernel& kernel = reduceKernel(t, op);
      ASSERT_EQ(kernel.elementSize, dataTypeSize(t));
      for (size_t count : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(255), size_t(256),
                           size_t(257), size_t(1000)}) {
        SCOPED_TRACE(std::string(dataTypeName(t)) + " " + opName(op) + " count " + std::to_string(count));
        std::vector<std::vector<uint8_t>> in = {makeInput(t, op, 0, count, 5), makeInput(t, op, 1, count, 5)};
        const size_t bytes = count * dataTypeSize(t);
        auto check = [&](const std::vector<uint8_t>& out) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ("", checkReduced(t, op, in, out.data(), i));
        };
        std::vector<uint8_t> a = in[0], b = in[1], out(bytes + 1);
        reduceTo(out.data(), a.data(), b.data(), count, t, op);
        check(out);
        std::vector<uint8_t> into = in[0];
        reduceInto(into.data(), in[1].data(), count, t, op);
        check(into);
        ASSERT_EQ(0, std::memcmp(into.data(), out.data(), bytes));
        std::vector<uint8_t> left = in[1];
        kernel.intoLeft(left.data(), in[0].data(), count);  // in0 OP in1, stored over in1
        ASSERT_EQ(0, std::memcmp(left.data(), out.data(), bytes));
        std::vector<uint8_t> aliasA = in[0];
        reduceTo(aliasA.data(), aliasA.data(), in[1].data(), count, t, op);
        ASSERT_EQ(0, std::memcmp(aliasA.data(), out.data(), bytes));
        std::vector<uint8_t> aliasB = in[1];
        reduceTo(aliasB.data(), in[0].data(), aliasB.data(), count, t, op);
        ASSERT_EQ(0, std::memcmp(aliasB.data(), out.data(), bytes));
      }
    }
  }
}

// The CPU-specific 16-bit float kernels (F16C / AVX2) must give exactly the portable bits,
// including NaN, Inf, subnormals, signed zeros and every tail length; toAndCopy too.
TEST(ReduceKernels, DispatchedHalfKernelsMatchPortable) {
  if (!detail::cpuHasAvx2F16c()) GTEST_SKIP() << "no AVX2/F16C here: the dispatched kernels are the portable ones";
  std::mt19937 rng(11);
  const size_t count = 4099;
  // Plenty of specials on both sides, and products/sums that overflow or go subnormal.
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00,
                               0x7c01, 0xfe01, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0080, 0x3c00, 0xbc00};
  const std::vector<uint16_t> a = randomWithSpecials(rng, count, specials, 3, 0);
  const std::vector<uint16_t> b = randomWithSpecials(rng, count, specials, 5, 7);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : allReduceOps()) {
      const ReduceKernel& fast = reduceKernel(t, op);
      const ReduceKernel& portable = portableReduceKernel(t, op);
      for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(255), size_t(256), size_t(257), count}) {
        auto same = [&](const std::vector<uint16_t>& u, const std::vector<uint16_t>& v) {
          return sameBitsButNaNPayload(t, u.data(), v.data(), n);
        };
        std::vector<uint16_t> x(n), y(n);
        fast.to(x.data(), a.data(), b.data(), n);
        portable.to(y.data(), a.data(), b.data(), n);
        ASSERT_EQ("", same(x, y)) << dataTypeName(t) << " " << opName(op) << " n=" << n;
        std::vector<uint16_t> l1(b.begin(), b.begin() + n), l2 = l1;
        fast.intoLeft(l1.data(), a.data(), n);
        portable.intoLeft(l2.data(), a.data(), n);
        ASSERT_EQ("", same(l1, l2));
        ASSERT_EQ("", same(l1, x));
        // toAndCopy (scaled or not, streamed or not; the copy one element off alignment).
        for (double factor : {1.0, 1.0 / 3.0}) {
          for (bool stream : {false, true}) {
            std::vector<uint16_t> d1(n), c1(n + 1), d2(n), c2(n);
            fast.toAndCopy(d1.data(), c1.data() + 1, a.data(), b.data(), n, factor, stream);
            portable.toAndCopy(d2.data(), c2.data(), a.data(), b.data(), n, factor, stream);
            collectives::streamFence();
            ASSERT_EQ("", same(d1, d2)) << "toAndCopy factor " << factor << (stream ? " streamed" : "");
            ASSERT_EQ("", same(std::vector<uint16_t>(c1.begin() + 1, c1.end()), d2));
            ASSERT_EQ("", same(c2, d2));
          }
        }
      }
    }
  }
}

// toAndCopy = to + scaleBuffer, written to two places: the same bits as those two calls, with
// and without streaming stores, unscaled and scaled, for destinations at any alignment and
// aliasing an operand exactly (in place: the copy is the caller's input), and every count
// around the vector and block sizes.
TEST(ReduceKernels, ToAndCopyIsToThenScaleWrittenTwice) {
  for (DataType t : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      const ReduceKernel& kernel = reduceKernel(t, op);
      const size_t elem = dataTypeSize(t);
      const bool scalable = t != DataType::kUInt16 && t != DataType::kInt16 && t != DataType::kBool;
      for (double factor : {1.0, 0.5}) {
        for (bool stream : {false, true}) {
          for (size_t count :
               {size_t(0), size_t(1), size_t(7), size_t(9), size_t(255), size_t(1023), size_t(1025), size_t(5000)}) {
            for (size_t shift : {size_t(0), size_t(1), size_t(3)}) {  // elements: moves the copy off alignment
              SCOPED_TRACE(std::string(dataTypeName(t)) + " " + opName(op) + " factor " + std::to_string(factor) +
                           (stream ? " streamed" : "") + " count " + std::to_string(count) + " shift " +
                           std::to_string(shift));
              const std::vector<uint8_t> a = makeInput(t, op, 0, count, 5), b = makeInput(t, op, 1, count, 5);
              const size_t bytes = count * elem;
              if (!scalable && factor != 1.0) {
                if (count == 0) continue;
                std::vector<uint8_t> dst(bytes), copy(bytes);
                EXPECT_THROW(kernel.toAndCopy(dst.data(), copy.data(), a.data(), b.data(), count, factor, stream),
                             Error);
                continue;
              }
              std::vector<uint8_t> expected(bytes + 1);
              reduceTo(expected.data(), a.data(), b.data(), count, t, op);
              scaleBuffer(expected.data(), count, t, factor);
              std::vector<uint8_t> dst(bytes + 1, 0xee), copyBuf((count + shift) * elem + 1, 0xee);
              uint8_t* copy = copyBuf.data() + shift * elem;
              kernel.toAndCopy(dst.data(), copy, a.data(), b.data(), count, factor, stream);
              collectives::streamFence();
              ASSERT_EQ(0, std::memcmp(dst.data(), expected.data(), bytes));
              ASSERT_EQ(0, std::memcmp(copy, expected.data(), bytes));
              ASSERT_EQ(dst[bytes], 0xee);  // nothing past the end
              ASSERT_EQ(copyBuf[(count + shift) * elem], 0xee);
              // In place: dst over a, copy over b (each aliasing an operand exactly).
              std::vector<uint8_t> overA = a, overB = b;
              kernel.toAndCopy(overA.data(), overB.data(), overA.data(), overB.data(), count, factor, stream);
              collectives::streamFence();
              ASSERT_EQ(0, std::memcmp(overA.data(), expected.data(), bytes));
              ASSERT_EQ(0, std::memcmp(overB.data(), expected.data(), bytes));
            }
          }
        }
      }
    }
  }
}

// The float32 toAndCopy computed in AVX registers (where the CPU has them) gives the portable
// kernel's bits, NaN, Inf, signed zeros and subnormals included.
TEST(ReduceKernels, DispatchedFloatToAndCopyMatchesPortable) {
  if (!detail::cpuHasAvx2F16c()) GTEST_SKIP() << "no AVX2/F16C here: the dispatched kernels are the portable ones";
  std::mt19937 rng(5);
  const size_t count = 4099;
  const float specials[] = {0.0f,
                            -0.0f,
                            1e-45f,
                            -1e-45f,
                            1.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(),
                            3.0f};
  const std::vector<float> a = randomWithSpecials(rng, count, specials, 3, 0);
  const std::vector<float> b = randomWithSpecials(rng, count, specials, 5, 4);
  const DataType f32 = DataType::kFloat32;
  for (ReduceOp op : allReduceOps()) {
    const ReduceKernel& fast = reduceKernel(DataType::kFloat32, op);
    const ReduceKernel& portable = portableReduceKernel(DataType::kFloat32, op);
    for (double factor : {1.0, 1.0 / 3.0}) {
      for (bool stream : {false, true}) {
        for (size_t n : {size_t(1), size_t(8), size_t(13), count}) {
          std::vector<float> d1(n), c1(n + 1), d2(n), c2(n);
          fast.toAndCopy(d1.data(), c1.data() + 1, a.data(), b.data(), n, factor, stream);
          portable.toAndCopy(d2.data(), c2.data(), a.data(), b.data(), n, factor, stream);
          collectives::streamFence();
          ASSERT_EQ("", sameBitsButNaNPayload(f32, d1.data(), d2.data(), n)) << opName(op) << " n=" << n;
          ASSERT_EQ("", sameBitsButNaNPayload(f32, c1.data() + 1, d2.data(), n)) << opName(op) << " n=" << n;
          ASSERT_EQ("", sameBitsButNaNPayload(f32, c2.data(), d2.data(), n));
        }
      }
    }
  }
}

TEST(ReduceKernels, IntegersWrap) {
  int8_t a[2] = {127, -128}, b[2] = {1, -1};
  reduceInto(a, b, 2, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(a[0], -128);
  EXPECT_EQ(a[1], 127);
  uint16_t c[1] = {65535}, d[1] = {65535};
  reduceInto(c, d, 1, DataType::kUInt16, ReduceOp::kProduct);
  EXPECT_EQ(c[0], 1);
  int32_t e[1] = {std::numeric_limits<int32_t>::max()}, f[1] = {2};
  reduceInto(e, f, 1, DataType::kInt32, ReduceOp::kProduct);
  EXPECT_EQ(e[0], -2);
}

TEST(ReduceKernels, BoolIsLogical) {
  uint8_t a[4] = {0, 0, 1, 2}, b[4] = {0, 3, 0, 1};
  uint8_t out[4];
  reduceTo(out, a, b, 4, DataType::kBool, ReduceOp::kSum);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4), (std::vector<uint8_t>{0, 1, 1, 1}));
  reduceTo(out, a, b, 4, DataType::kBool, ReduceOp::kMax);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4), (std::vector<uint8_t>{0, 1, 1, 1}));
  reduceTo(out, a, b, 4, DataType::kBool, ReduceOp::kProduct);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4), (std::vector<uint8_t>{0, 0, 0, 1}));
  reduceTo(out, a, b, 4, DataType::kBool, ReduceOp::kMin);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4), (std::vector<uint8_t>{0, 0, 0, 1}));
}

TEST(ReduceKernels, FloatSpecials) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  float a[4] = {nan, 1.0f, inf, -0.0f}, b[4] = {1.0f, nan, -inf, 0.0f};
  float out[4];
  reduceTo(out, a, b, 4, DataType::kFloat32, ReduceOp::kMin);
  EXPECT_TRUE(std::isnan(out[0]));  // NaN propagates from either side
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], -inf);
  reduceTo(out, a, b, 4, DataType::kFloat32, ReduceOp::kMax);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], inf);
  reduceTo(out, a, b, 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(std::isnan(out[2]));  // inf + -inf
  // fp16: Inf + finite stays Inf; overflow saturates to Inf.
  uint16_t h[2] = {0x7c00, 0x7bff}, g[2] = {0x3c00, 0x7bff};
  reduceInto(h, g, 2, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(h[0], 0x7c00);
  EXPECT_EQ(h[1], 0x7c00);
}

TEST(ScaleBuffer, IntegersTruncateTowardZero) {
  int32_t v[4] = {5, -5, 7, -7};
  scaleBuffer(v, 4, DataType::kInt32, 0.5);
  EXPECT_EQ(std::vector<int32_t>(v, v + 4), (std::vector<int32_t>{2, -2, 3, -3}));
  int64_t w[2] = {int64_t(1) << 40, -3};
  scaleBuffer(w, 2, DataType::kInt64, 1.0 / 3.0);
  EXPECT_EQ(w[0], static_cast<int64_t>(static_cast<double>(int64_t(1) << 40) / 3.0));
  EXPECT_EQ(w[1], -1);
  uint8_t u[2] = {255, 9};
  scaleBuffer(u, 2, DataType::kUInt8, 0.25);
  EXPECT_EQ(u[0], 63);
  EXPECT_EQ(u[1], 2);
  int8_t s[1] = {-9};
  scaleBuffer(s, 1, DataType::kInt8, 0.5);
  EXPECT_EQ(s[0], -4);
}

TEST(ScaleBuffer, Floats) {
  float f[3] = {1.0f, -3.0f, 0.1f};
  scaleBuffer(f, 3, DataType::kFloat32, 0.5);
  EXPECT_EQ(f[0], 0.5f);
  EXPECT_EQ(f[1], -1.5f);
  EXPECT_EQ(f[2], 0.1f * 0.5f);  // in float32
  double d[1] = {0.1};
  scaleBuffer(d, 1, DataType::kFloat64, 1.0 / 3.0);
  EXPECT_EQ(d[0], 0.1 * (1.0 / 3.0));
  std::vector<uint16_t> h(300), bf(300);
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = floatToHalf(static_cast<float>(i) - 100.0f);
    bf[i] = floatToBfloat16(static_cast<float>(i) * 3.0f);
  }
  scaleBuffer(h.data(), h.size(), DataType::kFloat16, 0.25);
  scaleBuffer(bf.data(), bf.size(), DataType::kBFloat16, 1.0 / 3.0);
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(h[i], floatToHalf(halfToFloat(floatToHalf(static_cast<float>(i) - 100.0f)) * 0.25f)) << i;
    float third = static_cast<float>(1.0 / 3.0);
    ASSERT_EQ(bf[i], floatToBfloat16(bfloat16ToFloat(floatToBfloat16(static_cast<float>(i) * 3.0f)) * third)) << i;
  }
}

TEST(ScaleBuffer, FactorOneIsNoOpAndUnsupportedTypesThrow) {
  uint16_t v[1] = {7};
  scaleBuffer(v, 1, DataType::kUInt16, 1.0);  // no-op, even for types that cannot be scaled
  EXPECT_EQ(v[0], 7);
  EXPECT_THROW(scaleBuffer(v, 1, DataType::kUInt16, 0.5), Error);
  int16_t w[1] = {7};
  EXPECT_THROW(scaleBuffer(w, 1, DataType::kInt16, 0.5), Error);
  uint8_t b[1] = {1};
  try {
    scaleBuffer(b, 1, DataType::kBool, 2.0);
    FAIL() << "bool scaling must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not supported by ScaleBufferCPUImpl"), std::string::npos);
  }
  float f[1] = {3.0f};
  scaleBuffer(f, 0, DataType::kFloat32, 0.0);  // empty buffer
  EXPECT_EQ(f[0], 3.0f);
}

}  // namespace
}  // namespace hvd::test
