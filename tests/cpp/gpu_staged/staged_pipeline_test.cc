// StagingPipeline (backends/cuda/staged_pipeline.h) on the CUDA stand-in, in a forked process (the
// stand-in's stream threads belong to the process that loaded it): the chunks the collective
// sees, zeros for missing tensors, the copies back, and an error in the middle of the chunks.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>
#include <vector>

#include "backends/cuda/staged_pipeline.h"
#include "gpu_device.h"
#include "support/forked_ranks.h"

namespace hvd {
namespace {

using cuda::DevicePiece;
using test_support::kFailed;
using test_support::kOk;

int inOwnProcess(const std::function<int()>& body) {
  auto codes = test_support::runForkedRanks(1, [&](int) {
    setenv("HOROVOD_CUDA_LIBRARY", HVD_CUDA_STANDIN, 1);
    return body();
  });
  return codes[0];
}

TEST(StagingPipeline, ChunksZerosAndCopiesBack) {
  EXPECT_EQ(inOwnProcess([] {
              const cuda::CudaApi& api = test::gpuApi();
              cuda::StagingPipeline pipeline(api, 0);
              cuda::PinnedBuffer host(api);
              host.reserve(1000);
              auto* buf = static_cast<uint8_t*>(host.data());
              // Two device tensors of 600 and 300 bytes and a missing one of 100 in between.
              test::DeviceTensor a(DataType::kUInt8, {600}), b(DataType::kUInt8, {300});
              for (size_t i = 0; i < 600; ++i) a.host.set(i, i % 200);
              for (size_t i = 0; i < 300; ++i) b.host.set(i, 7);
              a.upload();
              b.upload();
              pipeline.after(test::producerStream());
              const std::vector<DevicePiece> pieces = {
                  {0, a.view().data, 600}, {600, nullptr, 100}, {700, b.view().data, 300}};
              std::vector<std::pair<size_t, size_t>> chunks;
              pipeline.run(buf, 1000, 300, pieces, pieces, [&](size_t begin, size_t end) {
                chunks.emplace_back(begin, end);
                for (size_t i = begin; i < end; ++i) buf[i] = static_cast<uint8_t>(buf[i] + 1);
              });
              const std::vector<std::pair<size_t, size_t>> want = {{0, 300}, {300, 600}, {600, 900}, {900, 1000}};
              if (chunks != want) return kFailed;
              for (size_t i = 600; i < 700; ++i) {
                if (buf[i] != 1) return kFailed;  // zeros, then the collective's +1
              }
              const auto gotA = test::download(a.view()), gotB = test::download(b.view());
              for (size_t i = 0; i < 600; ++i) {
                if (gotA[i] != i % 200 + 1) return kFailed;
              }
              for (double v : gotB) {
                if (v != 8) return kFailed;
              }
              return kOk;
            }),
            kOk);
}

// A collective that throws in the second chunk: run() rethrows after the queued copies finished,
// so the buffers can be freed at once (the stand-in fails a free of memory still in use).
TEST(StagingPipeline, ErrorWaitsForQueuedCopies) {
  EXPECT_EQ(inOwnProcess([] {
              const cuda::CudaApi& api = test::gpuApi();
              auto pipeline = std::make_unique<cuda::StagingPipeline>(api, 0);
              auto host = std::make_unique<cuda::PinnedBuffer>(api);
              host->reserve(1 << 20);
              auto t = std::make_unique<test::DeviceTensor>(DataType::kFloat32, std::vector<int64_t>{1 << 18});
              t->upload();
              pipeline->after(test::producerStream());
              const std::vector<DevicePiece> pieces = {{0, t->view().data, 1 << 20}};
              int calls = 0;
              try {
                pipeline->run(static_cast<uint8_t*>(host->data()), 1 << 20, 1 << 16, pieces, pieces,
                              [&](size_t, size_t) {
                                if (++calls == 2) throw std::runtime_error("peer lost");
                              });
                return kFailed;
              } catch (const std::runtime_error& e) {
                if (std::string(e.what()) != "peer lost" || calls != 2) return kFailed;
              }
              if (api.rt.freeHost(host->data()) != cudaSuccess) return kFailed;  // no copy still uses it
              (void)host.release();
              return kOk;
            }),
            kOk);
}

}  // namespace
}  // namespace hvd
