// coord_bench: the engine's coordination overhead in a steady-state training step, through the
// public C++ API.
//
//   horovodrun -np 2 build/bench/coord_bench [--steps 200] [--tensors 160] [--smoke]
//
// A step enqueues 160 gradient-like tensors (sizes log-uniform from 1 KiB to 1 MiB, ~24 MB in
// all, like ResNet-50's gradient list) with allreduceAsync and waits for all of them;
// --tensor-bytes 16 makes every tensor tiny, which leaves little but the coordination itself;
// --late-rank-us N makes the last rank start each step's enqueues N us after the others (busy,
// like a rank whose backward pass runs longer), so the others wait for it: what their waking up
// costs shows in the figures (see docs/performance.md, HOROVOD_CALLER_SPIN_US).
//
// The ranks share one host clock (steady_clock is CLOCK_MONOTONIC), and the engine records when
// its background thread starts executing a data response (engine::RuntimeStats::lastDataStartNs,
// read through the default runtime: an internal header, so this benchmark is built from the
// source tree only). The coordination overhead of a step is then measured directly:
//     coord_enqueue_to_collective = max over ranks of (start of the step's last collective)
//                                 - max over ranks of (return of the step's last enqueue)
// i.e. from the last enqueue on the last rank to the start of the fused collective on the last
// rank to start it. Breakdown rows, same origin: ..._to_requests_sent (the last rank handed its
// requests to the coordinator), ..._to_list_built (rank 0 posted the response list),
// ..._to_list_start (the last rank began processing it), and per rank how long after rank 0
// posted the list that rank began processing it (with more ranks than CPUs, a rank that has to
// wait for a CPU shows here). The older approximation is kept:
//     approx_overhead = step tail (last enqueue -> last completion) - one allreduce of the same
//                       total bytes, measured interleaved with the steps.
// Also reports the synchronous 8-byte allreduce latency, and the control-plane bytes and
// messages each rank sends per step (max over ranks, from the engine's counters), with the
// bytes as bits per tensor.
#include <horovod/horovod.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "api/default_runtime.h"
#include "harness/collectives.h"
#include "harness/data.h"
#include "harness/harness.h"

namespace {

using Clock = std::chrono::steady_clock;
using hvd::bench::Buffer;
using hvd::bench::percentile;

double nowSeconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

hvd::TensorView floats(void* data, size_t count) {
  hvd::TensorView v;
  v.data = data;
  v.dtype = hvd::DataType::kFloat32;
  v.shape = {static_cast<int64_t>(count)};
  return v;
}

void maxOverRanks(std::vector<double>& values, const char* what) {
  hvd::TensorView v;
  v.data = values.data();
  v.dtype = hvd::DataType::kFloat64;
  v.shape = {static_cast<int64_t>(values.size())};
  hvd::Options o;
  o.name = std::string("coord.stats.") + what;
  o.op = hvd::ReduceOp::kMax;
  hvd::allreduce(v, v, o);
}

// Element counts of `n` tensors, log-uniform between 1 KiB and 1 MiB of float32, in a fixed
// shuffled order (a backward pass does not produce gradients sorted by size).
std::vector<size_t> gradientCounts(int n, int fixedBytes) {
  std::vector<size_t> counts;
  if (fixedBytes > 0) return std::vector<size_t>(size_t(n), std::max<size_t>(1, size_t(fixedBytes) / 4));
  for (int i = 0; i < n; ++i) {
    double bytes = 1024.0 * std::pow(1024.0, n > 1 ? double(i) / (n - 1) : 0.0);
    counts.push_back(std::max<size_t>(1, size_t(bytes) / 4));
  }
  uint64_t state = 12345;
  for (int i = n - 1; i > 0; --i) {  // Fisher-Yates with a fixed LCG
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(counts[size_t(i)], counts[size_t(state >> 33) % size_t(i + 1)]);
  }
  return counts;
}

struct Args {
  int steps = 200;
  int warmup = 20;
  int tensors = 160;
  int latencyIters = 2000;
  int tensorBytes = 0;  // > 0: every tensor this size (isolates coordination from data movement)
  int lateRankUs = 0;   // > 0: the last rank starts each step this much later, busy
  bool smoke = false;
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (f == "--steps") a.steps = next();
    else if (f == "--warmup") a.warmup = next();
    else if (f == "--tensors") a.tensors = std::max(1, next());
    else if (f == "--latency-iters") a.latencyIters = next();
    else if (f == "--tensor-bytes") a.tensorBytes = next();
    else if (f == "--late-rank-us") a.lateRankUs = std::max(0, next());
    else if (f == "--smoke") a.smoke = true;
    else {
      std::cerr << "usage: " << argv[0]
                << " [--steps N] [--warmup N] [--tensors N] [--tensor-bytes B] [--late-rank-us N]"
                   " [--latency-iters N] [--smoke]\n";
      std::exit(2);
    }
  }
  if (a.smoke) {
    a.steps = 2;
    a.warmup = 1;
    a.latencyIters = 2;
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) try {
  Args args = parseArgs(argc, argv);
  hvd::init();
  const int rank = hvd::rank(), n = hvd::size();
  const bool lead = rank == 0;

  std::vector<size_t> counts = gradientCounts(args.tensors, args.tensorBytes);
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<Buffer> in, out;
  std::vector<std::string> names;
  for (size_t i = 0; i < counts.size(); ++i) {
    in.emplace_back(counts[i] * 4);
    out.emplace_back(counts[i] * 4);
    hvd::bench::fillElements(in.back().data(), hvd::bench::ElemType::kFloat32, counts[i],
                             [rank, i](size_t k) { return (rank + 1) * int((k + i) % 5 + 1); });
    names.push_back("coord.grad." + std::to_string(i));
  }
  Buffer flatIn(total * 4), flatOut(total * 4);
  std::fill_n(static_cast<float*>(flatIn.data()), total, float(rank + 1));

  std::vector<hvd::WorkPtr> work(counts.size());
  auto engine = hvd::api::runtimeForOps();
  engine->setLatencyProbes(true);
  struct Probe {
    double requestsSent = 0, listBuilt = 0, listStart = 0, dataStart = 0;
  };
  auto probe = [&] {
    hvd::engine::RuntimeStats st = engine->stats();
    return Probe{st.lastRequestsSentNs * 1e-9, st.lastListBuiltNs * 1e-9, st.lastListStartNs * 1e-9,
                 st.lastDataStartNs * 1e-9};
  };
  const double lateBy = rank == n - 1 && n > 1 ? args.lateRankUs * 1e-6 : 0.0;
  auto step = [&](double* lastEnqueue, double* done) {
    if (lateBy > 0) {
      const double until = nowSeconds() + lateBy;
      while (nowSeconds() < until) {
      }
    }
    for (size_t i = 0; i < counts.size(); ++i) {
      hvd::Options o;
      o.name = names[i];
      work[i] = hvd::allreduceAsync(floats(in[i].data(), counts[i]), floats(out[i].data(), counts[i]), o);
    }
    *lastEnqueue = nowSeconds();
    for (auto& w : work) w->wait();
    *done = nowSeconds();
  };
  auto flat = [&](double* start, double* done) {
    hvd::Options o;
    o.name = "coord.flat";
    *start = nowSeconds();
    hvd::allreduce(floats(flatIn.data(), total), floats(flatOut.data(), total), o);
    *done = nowSeconds();
  };

  double a, b;
  for (int w = 0; w < args.warmup; ++w) {
    step(&a, &b);
    flat(&a, &b);
  }
  // Interleaved: step, single allreduce, step, ... Timestamps are absolute; the last rank to
  // enqueue and the last rank to finish decide each figure.
  std::vector<double> stepEnq(size_t(args.steps)), stepDone(size_t(args.steps));
  std::vector<double> flatStart(size_t(args.steps)), flatDone(size_t(args.steps));
  std::vector<double> reqSent(size_t(args.steps)), listBuilt(size_t(args.steps)), listStart(size_t(args.steps)),
      dataStart(size_t(args.steps));
  hvd::barrier();
  for (int s = 0; s < args.steps; ++s) {
    step(&stepEnq[size_t(s)], &stepDone[size_t(s)]);
    Probe p = probe();
    reqSent[size_t(s)] = p.requestsSent;
    listBuilt[size_t(s)] = p.listBuilt;  // 0 except on rank 0: the max is rank 0's
    listStart[size_t(s)] = p.listStart;
    dataStart[size_t(s)] = p.dataStart;
    flat(&flatStart[size_t(s)], &flatDone[size_t(s)]);
  }
  size_t bad = 0;
  const int64_t tri = int64_t(n) * (n + 1) / 2;
  for (size_t i = 0; i < counts.size(); ++i)
    bad += hvd::bench::countMismatches(out[i].data(), hvd::bench::ElemType::kFloat32, counts[i],
                                       [tri, i](size_t k) { return tri * int64_t((k + i) % 5 + 1); });
  bad +=
      hvd::bench::countMismatches(flatOut.data(), hvd::bench::ElemType::kFloat32, total, [tri](size_t) { return tri; });
  // Control-plane traffic of pure steps (no single allreduce in between), per rank per step.
  const int statSteps = std::max(1, std::min(args.steps, 50));
  hvd::engine::RuntimeStats before = hvd::api::runtimeForOps()->stats();
  for (int s = 0; s < statSteps; ++s) step(&a, &b);
  hvd::engine::RuntimeStats after = hvd::api::runtimeForOps()->stats();
  std::vector<double> control{double(after.controlBytesSent - before.controlBytesSent) / statSteps,
                              double(after.controlMessagesSent - before.controlMessagesSent) / statSteps,
                              double(after.responses - before.responses) / statSteps,
                              double(after.callerDrives - before.callerDrives) / statSteps,
                              double(after.parks - before.parks) / statSteps};
  maxOverRanks(control, "control");

  maxOverRanks(stepEnq, "enq");
  maxOverRanks(stepDone, "done");
  maxOverRanks(flatStart, "fstart");
  maxOverRanks(flatDone, "fdone");
  maxOverRanks(reqSent, "reqsent");
  maxOverRanks(listBuilt, "listbuilt");  // rank 0's (the others record 0)
  // Per rank, before listStart becomes the max over ranks: how long after rank 0 posted the
  // response list this rank began processing it (p50, p90). Each rank fills its own two
  // entries; the others' stay below any real value.
  std::vector<double> perRank(size_t(2 * n), -1e30);
  {
    std::vector<double> reach;
    for (int s = 0; s < args.steps; ++s) reach.push_back(listStart[size_t(s)] - listBuilt[size_t(s)]);
    perRank[size_t(2 * rank)] = percentile(reach, 50);
    perRank[size_t(2 * rank + 1)] = percentile(reach, 90);
    maxOverRanks(perRank, "reach");
  }
  maxOverRanks(listStart, "liststart");
  maxOverRanks(dataStart, "datastart");
  std::vector<double> badVec{double(bad)};
  maxOverRanks(badVec, "bad");

  // Synchronous 8-byte allreduce latency (two float32), per iteration, max over ranks.
  std::vector<double> lat(size_t(args.latencyIters));
  float small[2] = {1.0f, 2.0f}, smallOut[2];
  hvd::Options lo;
  lo.name = "coord.latency";
  for (int w = 0; w < std::min(args.latencyIters, 100); ++w) hvd::allreduce(floats(small, 2), floats(smallOut, 2), lo);
  hvd::barrier();
  double t0 = nowSeconds();
  for (size_t i = 0; i < lat.size(); ++i) {
    hvd::allreduce(floats(small, 2), floats(smallOut, 2), lo);
    double t1 = nowSeconds();
    lat[i] = t1 - t0;
    t0 = t1;
  }
  maxOverRanks(lat, "lat");

  if (lead) {
    std::vector<double> tail, flatTime, overhead, toReq, toBuilt, toList, toData;
    for (int s = 0; s < args.steps; ++s) {
      const size_t i = size_t(s);
      tail.push_back(stepDone[i] - stepEnq[i]);
      flatTime.push_back(flatDone[i] - flatStart[i]);
      toReq.push_back(reqSent[i] - stepEnq[i]);
      toBuilt.push_back(listBuilt[i] - stepEnq[i]);
      toList.push_back(listStart[i] - stepEnq[i]);
      toData.push_back(dataStart[i] - stepEnq[i]);
    }
    double flatMed = percentile(flatTime, 50);
    for (double t : tail) overhead.push_back(t - flatMed);
    std::printf("# coord_bench ranks=%d tensors=%zu total_bytes=%zu steps=%d warmup=%d late_rank_us=%d%s\n", n,
                counts.size(), total * 4, args.steps, args.warmup, args.lateRankUs, args.smoke ? " smoke=1" : "");
    std::printf("#%23s %12s %12s\n", "metric", "p50_us", "p99_us");
    auto row = [](const char* name, const std::vector<double>& v) {
      std::printf("%24s %12.2f %12.2f\n", name, percentile(v, 50) * 1e6, percentile(v, 99) * 1e6);
    };
    row("coord_enqueue_to_collective", toData);
    row("  ..._to_requests_sent", toReq);
    row("  ..._to_list_built", toBuilt);
    row("  ..._to_list_start", toList);
    row("step_tail", tail);
    row("single_allreduce", flatTime);
    row("approx_overhead", overhead);
    row("sync_allreduce_8B", lat);
    std::printf("# response list reached each rank, us after rank 0 posted it, p50/p90:");
    for (int r = 0; r < n; ++r) {
      std::printf(" r%d %.1f/%.1f", r, perRank[size_t(2 * r)] * 1e6, perRank[size_t(2 * r + 1)] * 1e6);
    }
    std::printf("\n");
    std::printf(
        "# control plane per step, max over ranks: bytes_sent=%.0f (%.2f bits/tensor) messages_sent=%.1f "
        "collectives_executed=%.1f\n",
        control[0], control[0] * 8 / double(counts.size()), control[1], control[2]);
    std::printf("# who ran the engine, per step, max over ranks: caller_drives=%.2f background_parks=%.2f\n",
                control[3], control[4]);
    std::printf("# check=%s\n", badVec[0] == 0 ? "OK" : "WRONG");
    std::fflush(stdout);
  }
  hvd::shutdown();
  return badVec[0] == 0 ? 0 : 1;
} catch (const hvd::Error& e) {
  std::cerr << "coord_bench: " << e.what() << "\n";
  return 3;
}
