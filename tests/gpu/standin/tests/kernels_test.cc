// hvd_cuda_kernels_v1 of the stand-in: results per hvd::DataType, and the launch checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "numeric.h"
#include "standin_hooks.h"

extern "C" const HvdCudaKernels* hvd_cuda_kernels_v1();

namespace {

class StandinKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    hvd_standin_clear_errors();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override { hvd_standin_clear_errors(); }

  // Copies `host` to device memory, scales it there, copies it back.
  template <typename T>
  std::vector<T> scaled(const std::vector<T>& host, int dtype, double factor) {
    size_t bytes = host.size() * sizeof(T);
    void* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
    std::vector<T> out(host.size());
    EXPECT_EQ(cudaMemcpyAsync(d, host.data(), bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
    EXPECT_EQ(k_->scale(d, d, static_cast<int64_t>(host.size()), dtype, factor, stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), d, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaFree(d), cudaSuccess);
    return out;
  }

  const HvdCudaKernels* k_ = hvd_cuda_kernels_v1();
  cudaStream_t stream_ = nullptr;
};

TEST_F(StandinKernels, ScaleIntegersTruncateTowardZeroAndSaturate) {
  EXPECT_EQ(scaled<int32_t>({1, 2, 3, -3, 5}, 4, 0.5), (std::vector<int32_t>{0, 1, 1, -1, 2}));
  EXPECT_EQ(scaled<int32_t>({3, -7, 5}, 4, 1.0 / 3), (std::vector<int32_t>{1, -2, 1}));
  EXPECT_EQ(scaled<uint8_t>({100, 200}, 0, 2.0), (std::vector<uint8_t>{200, 255}));
  EXPECT_EQ(scaled<int8_t>({100, -100}, 1, 2.0), (std::vector<int8_t>{127, -128}));
  EXPECT_EQ(scaled<uint16_t>({1000}, 2, 0.25), (std::vector<uint16_t>{250}));
  EXPECT_EQ(scaled<int16_t>({-1000}, 3, 0.3), (std::vector<int16_t>{-300}));
  EXPECT_EQ(scaled<int64_t>({int64_t{1} << 40, 7}, 5, 3.0), (std::vector<int64_t>{3 * (int64_t{1} << 40), 21}));
  EXPECT_EQ(scaled<uint8_t>({0, 1, 1}, 10, 0.4), (std::vector<uint8_t>{0, 0, 0}));  // bool: 0.4 rounds to 0
  EXPECT_EQ(scaled<uint8_t>({0, 1}, 10, 2.0), (std::vector<uint8_t>{0, 1}));
}

TEST_F(StandinKernels, ScaleFloatsInTheirPrecision) {
  EXPECT_EQ(scaled<double>({1.5, -2.0}, 9, 0.1), (std::vector<double>{1.5 * 0.1, -2.0 * 0.1}));
  EXPECT_EQ(scaled<float>({1.5f, -2.0f}, 8, 0.1), (std::vector<float>{1.5f * 0.1f, -2.0f * 0.1f}));
  std::vector<uint16_t> half{standin::floatToHalf(1.0f), standin::floatToHalf(-3.0f), standin::floatToHalf(65504.0f)};
  auto h = scaled(half, 6, 0.5);
  EXPECT_EQ(standin::halfToFloat(h[0]), 0.5f);
  EXPECT_EQ(standin::halfToFloat(h[1]), -1.5f);
  EXPECT_EQ(standin::halfToFloat(h[2]), 32752.0f);
  auto hi = scaled(half, 6, 4.0);
  EXPECT_TRUE(std::isinf(standin::halfToFloat(hi[2])));  // overflows float16, as on the device
  std::vector<uint16_t> bf{standin::floatToBf16(3.0f), standin::floatToBf16(1e30f)};
  auto b = scaled(bf, 7, 0.25);
  EXPECT_EQ(standin::bf16ToFloat(b[0]), 0.75f);
  EXPECT_NEAR(standin::bf16ToFloat(b[1]), 2.5e29f, 2.5e29f / 128);
}

TEST_F(StandinKernels, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(standin::floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(standin::floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(standin::floatToHalf(65520.0f), 0x7C00);              // rounds up to inf
  EXPECT_EQ(standin::floatToHalf(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(standin::floatToHalf(1.0f + 1.0f / 2048), 0x3C00);      // tie -> even
  EXPECT_EQ(standin::floatToHalf(1.0f + 3.0f / 2048), 0x3C02);
  for (uint32_t bits = 0; bits < 0x7C00; ++bits)
    ASSERT_EQ(standin::floatToHalf(standin::halfToFloat(static_cast<uint16_t>(bits))), bits) << bits;
  EXPECT_EQ(standin::floatToBf16(1.0f), 0x3F80);
}

TEST_F(StandinKernels, BatchedCopyCopiesEveryBuffer) {
  std::vector<char> host(300);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<char>(i);
  void* fused = nullptr;
  void* parts[3] = {};
  ASSERT_EQ(cudaMalloc(&fused, 300), cudaSuccess);
  for (auto& p : parts) ASSERT_EQ(cudaMalloc(&p, 100), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(fused, host.data(), 300, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  const void* src[3] = {static_cast<char*>(fused) + 200, static_cast<char*>(fused), static_cast<char*>(fused) + 100};
  size_t bytes[3] = {100, 100, 50};
  ASSERT_EQ(k_->batchedCopy(parts, src, bytes, 3, stream_), cudaSuccess);
  std::vector<char> out(100);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), parts[0], 100, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(std::memcmp(out.data(), host.data() + 200, 100), 0);
}

TEST_F(StandinKernels, LaunchesAreChecked) {
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  std::vector<float> pageable(16);
  EXPECT_EQ(k_->scale(pageable.data(), pageable.data(), 16, 8, 2.0, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(k_->scale(d, d, 17, 8, 2.0, stream_), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(k_->scale(d, d, 16, 11, 2.0, stream_), cudaErrorInvalidValue);  // unknown dtype
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(k_->scale(d, d, 16, 8, 2.0, stream_), cudaErrorInvalidValue);  // memory of device 0
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(k_->scale(d, d, 16, 8, 2.0, other), cudaErrorInvalidResourceHandle);  // stream of device 1
}

TEST_F(StandinKernels, KernelsDeclareTheirBuffersToTheOrderingChecker) {
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 64, stream_), cudaSuccess);
  EXPECT_EQ(k_->scale(d, d, 16, 8, 2.0, other), cudaErrorLaunchFailure);
}

}  // namespace
