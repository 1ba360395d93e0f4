#include "harness/bench_main.h"

#include <iostream>

#include "harness/harness.h"

namespace hvd::bench {

int benchMain(int argc, char** argv, const std::function<std::unique_ptr<BenchComm>()>& makeComm) {
  std::string error;
  auto options = parseBenchOptions(argc, argv, &error);
  if (!options) {
    std::cerr << error;
    return 2;
  }
  MemoryUsage before = readMemoryUsage();
  options->baselinePssKiB = before.pssKiB;
  std::unique_ptr<BenchComm> comm = makeComm();
  MemoryUsage afterInit = readMemoryUsage();
  int wrong = runBenchmark(*comm, *options, std::cout);
  MemoryUsage end = readMemoryUsage();
  // Largest value over ranks of each figure, in KiB.
  std::vector<double> mem{double(before.rssKiB), double(afterInit.rssKiB - before.rssKiB),
                          double(end.rssKiB - before.rssKiB), double(end.hwmKiB)};
  comm->maxOverRanks(mem);
  if (comm->rank() == 0) {
    std::cout << "# memory_kib (max over ranks): rss_before_init=" << long(mem[0]) << " added_by_init=" << long(mem[1])
              << " added_at_end=" << long(mem[2]) << " hwm_end=" << long(mem[3]) << "\n";
    std::cout << "# rows_wrong=" << wrong << "\n";
  }
  comm.reset();
  return wrong ? 1 : 0;
}

}  // namespace hvd::bench
