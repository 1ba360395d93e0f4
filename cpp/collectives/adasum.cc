#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "collectives/half.h"
#include "horovod/errors.h"

namespace hvd::collectives {
namespace {

// ---- element access per dtype ------------------------------------------------------------------
//
// The loops below run over float or double values: float16 and bfloat16 are widened to float in
// blocks first (the conversions in half.h are select-only, so those loops vectorise, and so do the
// float/double loops after them), and narrowed back from float.

// Independent accumulators per loop, so that the loops are not one long dependency chain; the
// lanes are summed in a fixed order.
constexpr size_t kLanes = 4;  // partials() sums them as (0 + 1) + (2 + 3)
constexpr size_t kBlock = 512;  // elements widened at a time
static_assert(kBlock % kLanes == 0, "a widened block ends on a lane boundary");

struct F16 {
  using Storage = uint16_t;
  using Value = float;
  static constexpr bool kWidened = true;
  static float widen(Storage x) { return detail::halfBitsToFloat(x); }
  static Storage narrow(float v) { return detail::floatToHalfBits(v); }
};
struct BF16 {
  using Storage = uint16_t;
  using Value = float;
  static constexpr bool kWidened = true;
  static float widen(Storage x) { return detail::bfloat16BitsToFloat(x); }
  static Storage narrow(float v) { return detail::floatToBfloat16Bits(v); }
};
template <typename T>
struct Native {
  using Storage = T;
  using Value = T;
  static constexpr bool kWidened = false;
  static T widen(Storage x) { return x; }
  static Storage narrow(T v) { return v; }
};
using F32 = Native<float>;
using F64 = Native<double>;

// The largest |a[i]| and |b[i]| over [0, n), as doubles, in one pass over both. float16/bfloat16:
// the largest storage with the sign masked off (integer order is magnitude order; a NaN counts as
// the largest, and then the result is NaN whatever the scale), a 16-bit integer max that
// vectorises; float/double: per-lane maxima of |x| (a NaN is skipped).
template <typename D>
void largestMagnitudes(const typename D::Storage* a, const typename D::Storage* b, size_t n, double& la, double& lb) {
  if constexpr (D::kWidened) {
    int16_t ma = 0, mb = 0;  // magnitudes fit in 15 bits: signed compares (SSE2's pmaxsw) are exact
    for (size_t i = 0; i < n; ++i) {
      ma = std::max<int16_t>(ma, static_cast<int16_t>(a[i] & 0x7fffu));
      mb = std::max<int16_t>(mb, static_cast<int16_t>(b[i] & 0x7fffu));
    }
    la = D::widen(static_cast<uint16_t>(ma));
    lb = D::widen(static_cast<uint16_t>(mb));
  } else {
    using V = typename D::Value;
    V pa[kLanes] = {}, pb[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) {
        pa[k] = std::max(pa[k], std::fabs(a[i + k]));
        pb[k] = std::max(pb[k], std::fabs(b[i + k]));
      }
    }
    for (; i < n; ++i) {
      pa[0] = std::max(pa[0], std::fabs(a[i]));
      pb[0] = std::max(pb[0], std::fabs(b[i]));
    }
    la = std::max(std::max(pa[0], pa[1]), std::max(pa[2], pa[3]));
    lb = std::max(std::max(pb[0], pb[1]), std::max(pb[2], pb[3]));
  }
}

// x[0, n) as D::Value: the storage itself, or widened into `block` (n <= kBlock).
template <typename D>
const typename D::Value* values(const typename D::Storage* x, size_t n, typename D::Value* block) {
  if constexpr (!D::kWidened) {
    return x;
  } else {
    for (size_t i = 0; i < n; ++i) block[i] = D::widen(x[i]);
    return block;
  }
}

// ---- partial sums: value = m * 2^e, so that squares of float64 extremes stay finite ------------

// Exponent of a partial that has no elements (its m is 0): below any real one.
constexpr double kNoExponent = -1.0e6;
// The power-of-two scales are clamped so that 2^-e itself stays a finite double.
constexpr int kMaxScaleExponent = 1000;

struct Scaled {
  double m = 0.0;
  double e = kNoExponent;
  double value() const { return m == 0.0 ? 0.0 : std::ldexp(m, static_cast<int>(e)); }
};

// lower + upper, in that order (every rank that forms this sum forms it alike).
Scaled plus(const Scaled& lower, const Scaled& upper) {
  const double e = std::max(lower.e, upper.e);
  Scaled s;
  s.e = e;
  s.m = std::ldexp(lower.m, static_cast<int>(lower.e - e)) + std::ldexp(upper.m, static_cast<int>(upper.e - e));
  return s;
}

// Per tensor: a.b, |a|^2, |b|^2 of the part of the tensor a rank holds.
struct Partials {
  Scaled dot, aa, bb;
};
constexpr size_t kDoublesPerPartials = 6;

// The exponent of the power of two that brings `largest` (the largest |x|) near 1.
int scaleExponent(double largest) {
  if (!(largest > 0.0)) return 0;  // zeros (and NaN: the result is NaN whatever the scale)
  if (std::isinf(largest)) return kMaxScaleExponent;
  return std::clamp(std::ilogb(largest), -kMaxScaleExponent, kMaxScaleExponent);
}

// Adds x[i] * y[i], x[i]^2 and y[i]^2 (x, y scaled by sa, sb) to the lanes, element i to lane
// i % kLanes (the tail to lane 0): the lanes are independent accumulators, so the loop is not one
// long dependency chain, and it vectorises (the compiler keeps each lane's sums in order).
template <typename V>
void accumulate(const V* x, const V* y, size_t n, double sa, double sb, double* dot, double* aa, double* bb) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      const double xs = static_cast<double>(x[i + k]) * sa, ys = static_cast<double>(y[i + k]) * sb;
      dot[k] += xs * ys;
      aa[k] += xs * xs;
      bb[k] += ys * ys;
    }
  }
  for (; i < n; ++i) {
    const double xs = static_cast<double>(x[i]) * sa, ys = static_cast<double>(y[i]) * sb;
    dot[0] += xs * ys;
    aa[0] += xs * xs;
    bb[0] += ys * ys;
  }
}

template <typename D>
Partials partials(const typename D::Storage* a, const typename D::Storage* b, size_t n) {
  using V = typename D::Value;
  double la = 0.0, lb = 0.0;
  largestMagnitudes<D>(a, b, n, la, lb);
  const int ea = scaleExponent(la), eb = scaleExponent(lb);
  const double sa = std::ldexp(1.0, -ea), sb = std::ldexp(1.0, -eb);
  double dot[kLanes] = {}, aa[kLanes] = {}, bb[kLanes] = {};
  V blockA[D::kWidened ? kBlock : 1], blockB[D::kWidened ? kBlock : 1];
  const size_t step = D::kWidened ? kBlock : n;
  for (size_t i = 0; i < n; i += step) {
    const size_t m = std::min(step, n - i);
    accumulate(values<D>(a + i, m, blockA), values<D>(b + i, m, blockB), m, sa, sb, dot, aa, bb);
  }
  const auto total = [](const double* lanes) { return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]); };
  Partials p;
  p.dot = {total(dot), static_cast<double>(ea + eb)};
  p.aa = {total(aa), 2.0 * ea};
  p.bb = {total(bb), 2.0 * eb};
  return p;
}

// out[i] = ca * a[i] + cb * b[i], computed in double and rounded once to the dtype (float16 and
// bfloat16 through float, as the stores always were).
template <typename D>
void combine(const typename D::Storage* a, const typename D::Storage* b, size_t n, double ca, double cb,
             typename D::Storage* out) {
  using V = typename D::Value;
  if constexpr (!D::kWidened) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<V>(ca * a[i] + cb * b[i]);
  } else {
    V blockA[kBlock], blockB[kBlock], blockOut[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = std::min(kBlock, n - i);
      const V* x = values<D>(a + i, m, blockA);
      const V* y = values<D>(b + i, m, blockB);
      for (size_t k = 0; k < m; ++k) blockOut[k] = static_cast<V>(ca * x[k] + cb * y[k]);
      for (size_t k = 0; k < m; ++k) out[i + k] = D::narrow(blockOut[k]);
    }
  }
}

// 1 - a.b / (2 |a|^2), or 1 when |a|^2 is below sqrt(DBL_MIN).
double coefficient(const Scaled& dot, const Scaled& self) {
  static const double kTiny = std::sqrt(DBL_MIN);
  if (!(self.value() >= kTiny)) return 1.0;
  return 1.0 - 0.5 * std::ldexp(dot.m / self.m, static_cast<int>(dot.e - self.e));
}

// Sums every rank's partials over the `groupSize` ranks (a power of two, aligned) that share
// this rank's group, by recursive doubling; identical bits on all of them.
void sumOverGroup(PairExchange& peers, int groupSize, std::vector<double>& mine, std::vector<double>& theirs) {
  const int r = peers.rank();
  const size_t bytes = mine.size() * sizeof(double);
  theirs.resize(mine.size());
  for (int m = 1; m < groupSize; m <<= 1) {
    const int peer = r ^ m;
    peers.sendRecv(peer, mine.data(), bytes, theirs.data(), bytes);
    const std::vector<double>& lower = peer < r ? theirs : mine;
    const std::vector<double>& upper = peer < r ? mine : theirs;
    for (size_t i = 0; i < mine.size(); i += 2) {
      const Scaled s = plus({lower[i], lower[i + 1]}, {upper[i], upper[i + 1]});
      mine[i] = s.m;
      mine[i + 1] = s.e;
    }
  }
}

// Completes the sums of partials over the members of `shards` (member order: the same bits on
// every member).
void sumOverShards(ShardGroup& shards, std::vector<double>& sums, std::vector<double>& all) {
  const int k = shards.size();
  if (k <= 1) return;
  const size_t count = sums.size();
  all.resize(count * static_cast<size_t>(k));
  shards.allgather(sums.data(), count, all.data());
  for (size_t i = 0; i < count; i += 2) {
    Scaled s{all[i], all[i + 1]};
    for (size_t m = 1; m < static_cast<size_t>(k); ++m) s = plus(s, {all[m * count + i], all[m * count + i + 1]});
    sums[i] = s.m;
    sums[i + 1] = s.e;
  }
}

struct Range {
  size_t begin = 0, count = 0;
};

template <typename D>
void run(PairExchange& peers, void* data, const std::vector<size_t>& counts, std::vector<uint8_t>& scratch,
         ShardGroup* shards) {
  using S = typename D::Storage;
  auto* buf = static_cast<S*>(data);
  const int n = peers.size(), r = peers.rank();
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t t = 0; t < counts.size(); ++t) offsets[t + 1] = offsets[t] + counts[t];
  const size_t total = offsets.back();
  if (n == 1 || total == 0) return;
  scratch.resize(std::max(scratch.size(), (total - total / 2) * sizeof(S)));
  auto* received = reinterpret_cast<S*>(scratch.data());

  std::vector<Range> kept, given;  // per level: the half this rank kept, the half its partner kept
  std::vector<double> sums(counts.size() * kDoublesPerPartials), theirs, all;
  Range slice{0, total};
  for (int level = 1; level < n; level <<= 1) {
    const int peer = r ^ level;
    const bool left = (r & level) == 0;
    const size_t first = slice.count / 2;
    Range mine{slice.begin, first}, other{slice.begin + first, slice.count - first};
    if (!left) std::swap(mine, other);
    peers.sendRecv(peer, buf + other.begin, other.count * sizeof(S), received, mine.count * sizeof(S));

    // a is the left half-group's vector, b the right one's.
    const S* a = left ? buf + mine.begin : received;
    const S* b = left ? received : buf + mine.begin;
    for (size_t t = 0; t < counts.size(); ++t) {
      const size_t lo = std::max(offsets[t], mine.begin), hi = std::min(offsets[t + 1], mine.begin + mine.count);
      Partials p;
      if (lo < hi) p = partials<D>(a + (lo - mine.begin), b + (lo - mine.begin), hi - lo);
      double* s = &sums[t * kDoublesPerPartials];
      s[0] = p.dot.m, s[1] = p.dot.e, s[2] = p.aa.m, s[3] = p.aa.e, s[4] = p.bb.m, s[5] = p.bb.e;
    }
    sumOverGroup(peers, 2 * level, sums, theirs);
    if (shards != nullptr) sumOverShards(*shards, sums, all);
    for (size_t t = 0; t < counts.size(); ++t) {
      const size_t lo = std::max(offsets[t], mine.begin), hi = std::min(offsets[t + 1], mine.begin + mine.count);
      if (lo >= hi) continue;
      const double* s = &sums[t * kDoublesPerPartials];
      const Scaled dot{s[0], s[1]}, aa{s[2], s[3]}, bb{s[4], s[5]};
      const double ca = coefficient(dot, aa), cb = coefficient(dot, bb);
      const S* ta = a + (lo - mine.begin);
      const S* tb = b + (lo - mine.begin);
      combine<D>(ta, tb, hi - lo, ca, cb, buf + lo);
    }
    kept.push_back(mine);
    given.push_back(other);
    slice = mine;
  }
  // Allgather, levels in reverse: each pair swaps the halves it finished.
  int level = n / 2;
  for (size_t i = kept.size(); i-- > 0; level >>= 1) {
    peers.sendRecv(r ^ level, buf + kept[i].begin, kept[i].count * sizeof(S), buf + given[i].begin,
                   given[i].count * sizeof(S));
  }
}

}  // namespace

bool adasumRankCountSupported(int n) { return n >= 1 && (n & (n - 1)) == 0; }

bool adasumTypeSupported(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 || dtype == DataType::kFloat32 ||
         dtype == DataType::kFloat64;
}

void adasum(PairExchange& peers, void* buf, const std::vector<size_t>& counts, DataType dtype,
            std::vector<uint8_t>& scratch, ShardGroup* shards) {
  if (!adasumRankCountSupported(peers.size())) {
    throw InvalidArgument("Adasum needs a power-of-two number of ranks; this process set has " +
                          std::to_string(peers.size()));
  }
  switch (dtype) {
    case DataType::kFloat16: return run<F16>(peers, buf, counts, scratch, shards);
    case DataType::kBFloat16: return run<BF16>(peers, buf, counts, scratch, shards);
    case DataType::kFloat32: return run<F32>(peers, buf, counts, scratch, shards);
    case DataType::kFloat64: return run<F64>(peers, buf, counts, scratch, shards);
    default: break;
  }
  throw InvalidArgument("Adasum reduces only float16, bfloat16, float32 and float64 tensors, not " +
                        std::string(dataTypeName(dtype)));
}

}  // namespace hvd::collectives
