// memcpy_roof: the machine's roof for a collective between processes on one host. N processes
// (fork) each copy a 64 MiB buffer into another, all at once, for a fixed time; the report is
// the bandwidth each one sustains (bytes copied per second, GB = 1e9 B): an intra-host
// collective cannot move data faster than its processes can copy it. Two copies are timed:
// glibc's memcpy (ordinary stores below its non-temporal threshold, so every destination line is
// read before it is written) and a copy with streaming stores (no such read): the second is the
// floor for a collective that reads its input once and streams its output once, as the shared
// allreduce does for large messages.
//
//   memcpy_roof -p 2 [-s 64M] [-t 1.0]      (-p accepts a list: -p 1,2,4)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/stream_copy.h"  // the copy the collectives stream their outputs with
#include "harness/collectives.h"
#include "harness/harness.h"

namespace {

using Clock = std::chrono::steady_clock;

// Runs in a child: waits for the start byte, copies for `seconds`, writes its GB/s to `out`.
void copier(int startFd, int outFd, size_t bytes, double seconds, bool streaming) {
  hvd::bench::Buffer src(bytes), dst(bytes);  // page-aligned
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 2, bytes);
  char go;
  if (read(startFd, &go, 1) != 1) _exit(1);
  size_t copies = 0;
  auto start = Clock::now();
  double elapsed = 0;
  do {
    if (streaming) {
      hvd::collectives::streamCopy(dst.data(), src.data(), bytes);  // fenced
    } else {
      std::memcpy(dst.data(), src.data(), bytes);
    }
    ++copies;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  double gbps = double(bytes) * double(copies) / elapsed / 1e9;
  if (write(outFd, &gbps, sizeof gbps) != sizeof gbps) _exit(1);
  _exit(0);
}

double measure(int procs, size_t bytes, double seconds, bool streaming, double* aggregate) {
  int start[2], results[2];
  if (pipe(start) != 0 || pipe(results) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  std::vector<pid_t> children;
  for (int p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      close(start[1]);
      close(results[0]);
      copier(start[0], results[1], bytes, seconds, streaming);
    }
    children.push_back(pid);
  }
  close(start[0]);
  close(results[1]);
  // Let every child allocate and touch its buffers before any starts copying.
  usleep(200000);
  std::string go(size_t(procs), 'g');
  if (write(start[1], go.data(), go.size()) != ssize_t(go.size())) std::exit(1);
  std::vector<double> rates;
  double rate;
  while (read(results[0], &rate, sizeof rate) == sizeof rate) rates.push_back(rate);
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  close(start[1]);
  close(results[0]);
  *aggregate = 0;
  for (double r : rates) *aggregate += r;
  return hvd::bench::percentile(rates, 50);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> procs{2};
  size_t bytes = size_t{64} << 20;
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "-p") {
      procs.clear();
      for (char* tok = std::strtok(argv[i + 1], ","); tok; tok = std::strtok(nullptr, ","))
        procs.push_back(std::max(1, std::atoi(tok)));
    } else if (flag == "-s") {
      bytes = size_t(std::atof(argv[i + 1]) * (std::strchr(argv[i + 1], 'M') ? 1 << 20 : 1));
    } else if (flag == "-t") {
      seconds = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [-p N[,N...]] [-s BYTES|NM] [-t SECONDS]\n", argv[0]);
      return 2;
    }
  }
  std::printf("# memcpy_roof buffer_bytes=%zu seconds=%.2f (GB = 1e9 B, bytes copied per second)\n", bytes,
              seconds);
  std::printf("#%5s %16s %16s %23s %23s\n", "procs", "per_proc_GBps", "aggregate_GBps", "streaming_per_proc_GBps",
              "streaming_aggregate_GBps");
  for (int p : procs) {
    double aggregate = 0, streamingAggregate = 0;
    const double perProc = measure(p, bytes, seconds, false, &aggregate);
    const double streamingPerProc = measure(p, bytes, seconds, true, &streamingAggregate);
    std::printf("%6d %16.3f %16.3f %23.3f %23.3f\n", p, perProc, aggregate, streamingPerProc, streamingAggregate);
    std::fflush(stdout);
  }
  return 0;
}
