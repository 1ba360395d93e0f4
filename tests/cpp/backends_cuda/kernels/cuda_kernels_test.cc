// Horovod's CUDA kernels (libhorovod_cuda_kernels.so, through the hvd_cuda_kernels_v1 table the
// backend uses) on a real GPU, against a float64 CPU reference: random data, outputs poisoned
// before each call (and the bytes around them checked untouched), odd sizes, misaligned
// pointers, every hvd::DataType, many buffers per batched copy.
//
//   cuda_kernels_test [path/to/libhorovod_cuda_kernels.so]
// Exit status: 0 passed, 1 failed, 77 skipped (no usable GPU; ctest reports it as skipped).
// Links the CUDA runtime statically, so it runs on a machine with only a driver.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "horovod/types.h"

namespace {

int failures = 0;
std::mt19937_64 rng(20261128);

#define CHECK_CUDA(call)                                                                               \
  do {                                                                                                 \
    cudaError_t status_ = (call);                                                                      \
    if (status_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

void fail(const std::string& what) {
  if (++failures <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// ---- fp16 / bf16 on the host (IEEE binary16, bfloat16) -------------------------------------------

double halfToDouble(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double value;
  if (exponent == 0) {
    value = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    value = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    value = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign ? -value : value;
}
double bf16ToDouble(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// A random finite half in about [-1000, 1000] (exponents 0..24 of 31).
uint16_t randomHalf() {
  uint16_t sign = rng() & 1, exponent = rng() % 25, mantissa = rng() & 0x3ff;
  return static_cast<uint16_t>(sign << 15 | exponent << 10 | mantissa);
}
uint16_t randomBf16() {
  float f = std::uniform_real_distribution<float>(-1000.f, 1000.f)(rng);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// ---- device buffers ------------------------------------------------------------------------------

struct DeviceBuffer {
  char* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ptr), n)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void upload(const std::vector<uint8_t>& host) {
    CHECK_CUDA(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> host(bytes);
    CHECK_CUDA(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return host;
  }
};

std::vector<uint8_t> randomBytes(size_t n) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

constexpr uint8_t kPoison = 0xA5;
// hvd::DataType's names, in its order (the core's dataTypeName is not linked here).
constexpr const char* kTypeNames[] = {"uint8",   "int8",     "uint16",  "int16",   "int32", "int64",
                                      "float16", "bfloat16", "float32", "float64", "bool"};
static_assert(sizeof(kTypeNames) / sizeof(kTypeNames[0]) == hvd::kNumDataTypes);

// ---- batchedCopy ---------------------------------------------------------------------------------

// `sizes` buffers at random offsets (independent for src and dst, so every alignment skew
// occurs) in one source and one destination region; checks every copied byte and that every
// byte outside the copies kept its poison.
void testBatchedCopy(const HvdCudaKernels& k, const std::vector<size_t>& sizes, cudaStream_t stream,
                     const char* label) {
  std::vector<size_t> srcOffsets, dstOffsets;
  size_t srcEnd = 0, dstEnd = 0;
  for (size_t size : sizes) {
    srcEnd += rng() % 64;
    dstEnd += rng() % 64;
    srcOffsets.push_back(srcEnd);
    dstOffsets.push_back(dstEnd);
    srcEnd += size;
    dstEnd += size;
  }
  srcEnd += 64;
  dstEnd += 64;
  DeviceBuffer src(srcEnd), dst(dstEnd);
  std::vector<uint8_t> srcHost = randomBytes(srcEnd);
  src.upload(srcHost);
  dst.upload(std::vector<uint8_t>(dstEnd, kPoison));
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    dsts.push_back(dst.ptr + dstOffsets[i]);
    srcs.push_back(src.ptr + srcOffsets[i]);
  }
  CHECK_CUDA(k.batchedCopy(dsts.data(), srcs.data(), sizes.data(), static_cast<int>(sizes.size()), stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint8_t> expected(dstEnd, kPoison);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::memcpy(expected.data() + dstOffsets[i], srcHost.data() + srcOffsets[i], sizes[i]);
  }
  std::vector<uint8_t> got = dst.download();
  for (size_t b = 0; b < dstEnd; ++b) {
    if (got[b] != expected[b]) {
      fail(std::string("batchedCopy ") + label + ": byte " + std::to_string(b) + " is " + std::to_string(got[b]) +
           ", expected " + std::to_string(expected[b]));
      return;
    }
  }
}

// ---- scale ---------------------------------------------------------------------------------------

// The element's value as a double (for the reference), from its bytes.
double valueOf(hvd::DataType t, const uint8_t* p) {
  switch (t) {
    case hvd::DataType::kUInt8: return *p;
    case hvd::DataType::kInt8: return *reinterpret_cast<const int8_t*>(p);
    case hvd::DataType::kUInt16: return *reinterpret_cast<const uint16_t*>(p);
    case hvd::DataType::kInt16: return *reinterpret_cast<const int16_t*>(p);
    case hvd::DataType::kInt32: return *reinterpret_cast<const int32_t*>(p);
    case hvd::DataType::kInt64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case hvd::DataType::kFloat16: return halfToDouble(*reinterpret_cast<const uint16_t*>(p));
    case hvd::DataType::kBFloat16: return bf16ToDouble(*reinterpret_cast<const uint16_t*>(p));
    case hvd::DataType::kFloat32: return *reinterpret_cast<const float*>(p);
    case hvd::DataType::kFloat64: return *reinterpret_cast<const double*>(p);
    case hvd::DataType::kBool: return *p;
  }
  return 0;
}

void randomElement(hvd::DataType t, uint8_t* p) {
  switch (t) {
    case hvd::DataType::kFloat16: {
      uint16_t h = randomHalf();
      std::memcpy(p, &h, 2);
      return;
    }
    case hvd::DataType::kBFloat16: {
      uint16_t b = randomBf16();
      std::memcpy(p, &b, 2);
      return;
    }
    case hvd::DataType::kFloat32: {
      float f = std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng);
      std::memcpy(p, &f, 4);
      return;
    }
    case hvd::DataType::kFloat64: {
      double d = std::uniform_real_distribution<double>(-1e12, 1e12)(rng);
      std::memcpy(p, &d, 8);
      return;
    }
    case hvd::DataType::kBool: *p = rng() % 2; return;
    case hvd::DataType::kInt64: {
      // Mostly within double's exact range, some beyond it.
      int64_t v = static_cast<int64_t>(rng()) >> (rng() % 2 ? 10 : 1);
      std::memcpy(p, &v, 8);
      return;
    }
    default: {
      uint64_t v = rng();
      std::memcpy(p, &v, hvd::dataTypeSize(t));
    }
  }
}

// The float64 reference of one scaled element, and whether `got` matches it.
bool matches(hvd::DataType t, double in, double factor, double got) {
  const double exact = in * factor;
  switch (t) {
    case hvd::DataType::kBool: return got == ((in != 0 && factor != 0) ? 1 : 0);
    case hvd::DataType::kFloat16: return std::fabs(got - exact) <= 1e-3 * std::fabs(exact) + 6e-8;
    case hvd::DataType::kBFloat16: return std::fabs(got - exact) <= 4e-3 * std::fabs(exact) + 1e-38;
    case hvd::DataType::kFloat32: return std::fabs(got - exact) <= 3e-7 * std::fabs(exact) + 1e-38;
    case hvd::DataType::kFloat64: return std::fabs(got - exact) <= 1e-15 * std::fabs(exact);
    default: break;
  }
  // Integers: truncated toward zero, saturated to the type's range.
  double lo = 0, hi = 0;
  switch (t) {
    case hvd::DataType::kUInt8: lo = 0, hi = 255; break;
    case hvd::DataType::kInt8: lo = -128, hi = 127; break;
    case hvd::DataType::kUInt16: lo = 0, hi = 65535; break;
    case hvd::DataType::kInt16: lo = -32768, hi = 32767; break;
    case hvd::DataType::kInt32: lo = -2147483648.0, hi = 2147483647.0; break;
    default: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
  }
  double want = std::trunc(exact);
  want = want < lo ? lo : (want > hi ? hi : want);
  return got == want;
}

void testScale(const HvdCudaKernels& k, hvd::DataType t, int64_t count, size_t offsetElements, bool inPlace,
               double factor, cudaStream_t stream) {
  const size_t size = hvd::dataTypeSize(t);
  const size_t pad = 64;
  const size_t bytes = (offsetElements + count) * size + pad;
  std::vector<uint8_t> input(bytes, kPoison);
  for (int64_t i = 0; i < count; ++i) randomElement(t, input.data() + (offsetElements + i) * size);
  DeviceBuffer in(bytes), out(bytes);
  in.upload(input);
  out.upload(std::vector<uint8_t>(bytes, kPoison));
  char* outPtr = (inPlace ? in.ptr : out.ptr) + offsetElements * size;
  const char* inPtr = in.ptr + offsetElements * size;
  CHECK_CUDA(k.scale(outPtr, inPtr, count, static_cast<int>(t), factor, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint8_t> got = (inPlace ? in : out).download();
  std::vector<uint8_t> poisonOnly(bytes, kPoison);
  const std::vector<uint8_t>& around = inPlace ? input : poisonOnly;
  const std::string label = std::string(kTypeNames[static_cast<int>(t)]) + " count " + std::to_string(count) +
                            " offset " + std::to_string(offsetElements) + (inPlace ? " in place" : "") + " factor " +
                            std::to_string(factor);
  for (size_t b = 0; b < bytes; ++b) {
    const bool inside = b >= offsetElements * size && b < (offsetElements + count) * size;
    if (!inside && got[b] != around[b]) {
      fail("scale " + label + ": byte " + std::to_string(b) + " outside the output was overwritten");
      return;
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const size_t at = (offsetElements + i) * size;
    const double x = valueOf(t, input.data() + at), y = valueOf(t, got.data() + at);
    if (!matches(t, x, factor, y)) {
      fail("scale " + label + ": element " + std::to_string(i) + ": " + std::to_string(x) + " * factor gave " +
           std::to_string(y));
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : HVD_KERNELS_LIBRARY;
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("cuda_kernels_test: skipped, no usable GPU (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 77;
  }
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "cuda_kernels_test: %s\n", dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<HvdCudaKernelsFn>(dlsym(library, HVD_CUDA_KERNELS_SYMBOL));
  if (entry == nullptr || entry()->version != kHvdCudaKernelsVersion) {
    std::fprintf(stderr, "cuda_kernels_test: %s has no kernel table of version %d\n", path, kHvdCudaKernelsVersion);
    return 1;
  }
  const HvdCudaKernels& k = *entry();
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // batchedCopy: one buffer; many small ones (more than one launch's worth); zero sizes mixed in;
  // one large odd-sized buffer among small ones; no buffers at all.
  testBatchedCopy(k, {1}, stream, "one byte");
  std::vector<size_t> small;
  for (int i = 0; i < 300; ++i) small.push_back(rng() % 3000);
  testBatchedCopy(k, small, stream, "300 small");
  testBatchedCopy(k, {0, 17, 0, 4096, 0}, stream, "with empty buffers");
  testBatchedCopy(k, {(size_t(48) << 20) + 13, 5, 1000003, 2}, stream, "large and small");
  CHECK_CUDA(k.batchedCopy(nullptr, nullptr, nullptr, 0, stream));
  if (k.batchedCopy(nullptr, nullptr, nullptr, 3, stream) != cudaErrorInvalidValue) fail("batchedCopy null arrays");

  // scale: every dtype, odd and large counts, aligned and misaligned, in place and not.
  for (int d = 0; d < hvd::kNumDataTypes; ++d) {
    auto t = static_cast<hvd::DataType>(d);
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000003)}) {
      for (size_t offset : {size_t(0), size_t(1), size_t(3)}) {
        for (double factor : {0.5, 3.0, -1.25, 1.0 / 3.0, 0.0}) {
          testScale(k, t, count, offset, (count + offset + d) % 2 == 0, factor, stream);
        }
      }
    }
  }
  if (k.scale(nullptr, nullptr, 5, 0, 2.0, stream) != cudaErrorInvalidValue) fail("scale null pointers");
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("cuda_kernels_test: %s on %s (sm_%d%d): %d failure(s)\n", failures ? "FAILED" : "passed", prop.name,
              prop.major, prop.minor, failures);
  return failures ? 1 : 0;
}
