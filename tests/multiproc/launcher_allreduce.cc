// A minimal Horovod program for launcher tests and the launch-latency benchmark: init, one
// allreduce (sum of rank+1 over every rank), shutdown. Prints
//   "allreduce ok rank=<r> size=<n> local_rank=<l> sum=<s> init_ms=<t> first_allreduce_ms=<t>"
// and exits 0 when the sum is n(n+1)/2 on every element, else prints the mismatch and exits 1.
// With argument "--fail-rank R", rank R exits 3 right after init (failure-path tests).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "horovod/horovod.h"

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  int failRank = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) failRank = std::atoi(argv[i + 1]);
  }
  try {
    auto start = Clock::now();
    hvd::init();
    auto initialized = Clock::now();
    if (hvd::rank() == failRank) {
      std::fprintf(stderr, "rank %d failing on purpose\n", failRank);
      return 3;
    }
    std::vector<float> data(1024, static_cast<float>(hvd::rank() + 1));
    hvd::TensorView view{data.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(data.size())}, {}};
    hvd::Options options;
    options.name = "launcher_check";
    hvd::allreduce(view, view, options);
    auto reduced = Clock::now();
    float expected = static_cast<float>(hvd::size() * (hvd::size() + 1) / 2);
    for (float v : data) {
      if (v != expected) {
        std::printf("allreduce MISMATCH rank=%d got=%g expected=%g\n", hvd::rank(), v, expected);
        return 1;
      }
    }
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf("allreduce ok rank=%d size=%d local_rank=%d sum=%g init_ms=%.1f first_allreduce_ms=%.1f\n", hvd::rank(),
                hvd::size(), hvd::localRank(), expected, ms(initialized - start), ms(reduced - start));
    std::fflush(stdout);
    hvd::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launcher_allreduce: %s\n", e.what());
    return 1;
  }
}
