// memcpy_roof: the machine's roof for a collective between processes on one host. N processes
// (fork) each copy a 64 MiB buffer into another, all at once, for a fixed time; the report is
// the bandwidth each one sustains (bytes copied per second, GB = 1e9 B): an intra-host
// collective cannot move data faster than its processes can copy it. Two copies are timed:
// glibc's memcpy (ordinary stores below its non-temporal threshold, so every destination line is
// read before it is written) and a copy with streaming stores (no such read): the second is the
// floor for a collective that reads its input once and streams its output once, as the shared
// allreduce does for large messages.
//
// -x measures instead what a shared-memory collective also depends on: how fast one CPU reads
// data another CPU just wrote (two processes on the first two CPUs of the affinity mask take
// turns writing a 1 MiB chunk of shared memory and reading the chunk the other wrote, one load per
// cache line; GB/s of the reads). On the development VM it reads ~50 GB/s while the two vCPUs
// share a last-level cache on the host and ~11 GB/s while they do not, a placement that changes
// by itself every few seconds to minutes and leaves the memcpy figures unchanged
// (bench/results/session19.md).
//
//   memcpy_roof -p 2 [-s 64M] [-t 1.0]      (-p accepts a list: -p 1,2,4)
//   memcpy_roof -x [-t 1.0]
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

// -x: the turn counter and two chunks in one shared mapping. Turn t (t >= 0) belongs to the
// process t % 2: it reads the chunk written at turn t - 1, writes chunk t % 2, passes the turn.
// -1 ends the run.
constexpr size_t kCrossChunk = size_t{1} << 20;

double crossTurns(std::atomic<int64_t>* turn, uint8_t* chunks, int me, double seconds) {
  const auto start = Clock::now();
  double readSeconds = 0;
  size_t reads = 0;
  uint32_t sink = 0;
  while (true) {
    int64_t t = turn->load(std::memory_order_acquire);
    if (t < 0) break;
    if (t % 2 != me) continue;
    if (t > 0) {
      const uint8_t* chunk = chunks + size_t((t - 1) % 2) * kCrossChunk;
      auto a = Clock::now();
      for (size_t i = 0; i < kCrossChunk; i += 64) sink += chunk[i];
      readSeconds += std::chrono::duration<double>(Clock::now() - a).count();
      ++reads;
    }
    std::memset(chunks + size_t(t % 2) * kCrossChunk, int(t), kCrossChunk);
    const bool done = me == 0 && std::chrono::duration<double>(Clock::now() - start).count() >= seconds;
    turn->store(done ? -1 : t + 1, std::memory_order_release);
    if (done) break;
  }
  if (sink == 0xdeadbeef) std::fputc(' ', stderr);  // keeps the reads
  return reads > 0 ? double(reads) * kCrossChunk / readSeconds / 1e9 : 0;
}

void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// GB/s at which a process reads what the other (on another CPU) wrote; -1 with fewer than 2 CPUs
// (or when the shared mapping or the second process cannot be made).
double crossCore(double seconds) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.size() < 2) return -1;
  const size_t length = 2 * kCrossChunk + 4096;
  void* map = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return -1;
  auto* turn = new (map) std::atomic<int64_t>(0);
  auto* chunks = static_cast<uint8_t*>(map) + 4096;
  std::memset(chunks, 0, 2 * kCrossChunk);
  int results[2] = {-1, -1};
  // Without the second process the turns would never come back: no fork, no run.
  pid_t pid = pipe(results) == 0 ? fork() : -1;
  if (pid < 0) {
    for (int fd : results) {
      if (fd >= 0) close(fd);
    }
    munmap(map, length);
    return -1;
  }
  if (pid == 0) {
    pinTo(cpus[1]);
    double rate = crossTurns(turn, chunks, 1, seconds);
    if (write(results[1], &rate, sizeof rate) != sizeof rate) _exit(1);
    _exit(0);
  }
  cpu_set_t saved = allowed;
  pinTo(cpus[0]);
  double mine = crossTurns(turn, chunks, 0, seconds);
  double theirs = 0;
  if (read(results[0], &theirs, sizeof theirs) != sizeof theirs) theirs = mine;
  waitpid(pid, nullptr, 0);
  sched_setaffinity(0, sizeof saved, &saved);
  close(results[0]);
  close(results[1]);
  munmap(map, length);
  return (mine + theirs) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> procs{2};
  size_t bytes = size_t{64} << 20;
  double seconds = 1.0;
  bool cross = false;
  for (int i = 1; i < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "-x") {
      cross = true;
      --i;  // takes no value
    } else if (i + 1 >= argc && (flag == "-p" || flag == "-s" || flag == "-t")) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
      return 2;
    } else if (flag == "-p") {
      procs.clear();
      for (char* tok = std::strtok(argv[i + 1], ","); tok; tok = std::strtok(nullptr, ","))
        procs.push_back(std::max(1, std::atoi(tok)));
    } else if (flag == "-s") {
      bytes = size_t(std::atof(argv[i + 1]) * (std::strchr(argv[i + 1], 'M') ? 1 << 20 : 1));
    } else if (flag == "-t") {
      seconds = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [-p N[,N...]] [-s BYTES|NM] [-t SECONDS] | -x [-t SECONDS]\n", argv[0]);
      return 2;
    }
  }
  if (cross) {
    std::printf("# cross-CPU reads of a 1 MiB chunk another CPU just wrote, one load per cache line, seconds=%.2f\n",
                seconds);
    std::printf("#%21s\n", "cross_cpu_read_GBps");
    const double rate = crossCore(seconds);
    if (rate < 0) {
      std::printf("%22s\n", "n/a");  // one usable CPU, or no second process
    } else {
      std::printf("%22.2f\n", rate);
    }
    return 0;
  }
  std::printf("# memcpy_roof buffer_bytes=%zu seconds=%.2f (GB = 1e9 B, bytes copied per second)\n", bytes, seconds);
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
