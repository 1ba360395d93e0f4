// The shared benchmark harness: command-line options, one small descriptor per collective, the
// timing loop and the report rows. Each system under test supplies a BenchComm; the same loop,
// data patterns and statistics then apply to all of them, so their rows compare directly.
//
// Row format (whitespace separated, '#' lines are comments; bench/compare parses it):
//   size count type redop root time_med_us time_p99_us algbw_GBps busbw_GBps check iters
// `size` is nccl-tests' size: the largest buffer of the operation on one rank (allgather: the
// gathered output; reducescatter: the input; alltoall: the send buffer; allreduce_batch: all k
// tensors together). Times are per iteration, the maximum over ranks of each iteration, then the
// median and 99th percentile over iterations. GB = 1e9 bytes. busbw = algbw * bus factor
// (allreduce 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n; broadcast 1).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "harness/bench_comm.h"

namespace hvd::bench {

struct BenchOptions {
  std::string op = "allreduce";
  ElemType type = ElemType::kFloat32;
  size_t minBytes = 4;
  size_t maxBytes = size_t{256} << 20;
  double factor = 4.0;   // size multiplier between rows
  int iters = 0;         // timed iterations per row; 0 = auto (>= minIters, ~targetSeconds)
  int minIters = 20;
  int maxIters = 2000;
  double targetSeconds = 0.25;
  int warmup = 5;
  int root = 0;          // broadcast
  int batch = 100;       // allreduce_batch: tensors per step
  bool smoke = false;    // tiny sizes, 2 iterations, check after every iteration
  bool header = true;
  // Memory of the process before the system under test was initialised (bench_main measures
  // it; proportional set size, see MemoryUsage); -1: the memory report takes the figure at the
  // start of runBenchmark.
  long baselinePssKiB = -1;
};

// Parses nccl-tests-like flags: -b min -e max -f factor -n iters -w warmup -o op -d dtype
// -r root -k batch --smoke --no-header. Sizes accept K/M/G suffixes (powers of 1024).
// Returns nullopt and sets *error (or the usage text for -h) on a bad command line.
std::optional<BenchOptions> parseBenchOptions(int argc, char** argv, std::string* error);
std::string benchUsage(const std::string& program);

// Runs every row; rank 0 prints. Returns the number of rows whose check failed.
// After each row it frees the row's buffers and the system's held outputs and reads the resident
// memory the system still adds to the process (VmRSS - baseline); the trailer reports the largest
// value over rows and ranks beside the system's fusion buffer, and checks the memory target:
// added <= fusion buffer + 32 MiB.
int runBenchmark(BenchComm& comm, const BenchOptions& options, std::ostream& out);

// Names of the collectives the harness knows, for usage text and validation.
std::vector<std::string> collectiveNames();

// Resident memory of this process from /proc/self/status and smaps_rollup, in KiB (0 if
// unreadable). The engine-memory report judges the proportional set size: a page mapped by k
// processes counts 1/k in each, so shared segments that peers map (a rank's shared outputs,
// its gradient buckets) count once over the job, where RSS would count them in every mapper.
struct MemoryUsage {
  long rssKiB = 0;
  long hwmKiB = 0;
  long pssKiB = 0;
  long anonKiB = 0;   // RssAnon: private memory
  long shmemKiB = 0;  // RssShmem: shared segments mapped and touched (own and peers')
};
MemoryUsage readMemoryUsage();

// Statistics helper shared with the other C++ benchmarks: sorts `values` and returns the
// nearest-rank percentile (p in [0, 100]).
double percentile(std::vector<double> values, double p);

}  // namespace hvd::bench
