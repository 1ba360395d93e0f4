#!/usr/bin/env python3
"""Small-message latency through horovod.torch (the Python path a training script takes).

    horovodrun -np 2 python3 bench/py_latency_bench.py [--iters 2000] [--steps 300] [--smoke]

Reports, as the maximum over ranks of each iteration, then p50/p99 over iterations:
  sync_allreduce_8B      hvd.allreduce of a 2-element float32 tensor (8 bytes), synchronous
  sync_8B_unnamed        the same without a name (a generated one: negotiated in full each
                         time, kept out of the response cache)
  sync_8B_fresh_names    the same with a new explicit name every call (cached, so at capacity
                         every call also evicts the least recently used entry)
  step_100x1KiB          100 x hvd.allreduce_async_ of 1 KiB tensors, then hvd.synchronize on all,
                         steps back to back (in place, hvd.Average), timed like the C++
                         harness's allreduce_batch: the Python counterpart of that row
  step_100x1KiB_fresh    the same with hvd.Sum on fresh inputs per step (clone and check
                         between steps, so each step also absorbs the ranks' arrival skew)
  enqueue_per_call       the time one allreduce_async_ call takes (the step's enqueue loop / 100)
  synchronize_per_call   the step's synchronize loop / 100 (includes waiting for the engine)
  sync_ready_per_call    one synchronize of an operation already completed (the same step, but
                         the synchronize loop starts once every handle polls complete): the
                         Python + binding cost of synchronize alone
  grouped_100x1KiB       engine-only reference: the same 100 tensors as one
                         hvd.grouped_allreduce_async_ call + one synchronize (one Python call
                         each way; the engine negotiates them as one group), steps back to back
                         like step_100x1KiB
and, derived from the p50s, the Python-side cost of one allreduce_async_ + synchronize pair
(enqueue_per_call + sync_ready_per_call). Every result is checked.
"""
import argparse
import os
import sys
import time

import torch

import horovod.torch as hvd


def percentile(values, p):
    values = sorted(values)
    k = max(1, -(-len(values) * p // 100))  # nearest rank
    return values[min(len(values), int(k)) - 1]


def max_over_ranks(values, name):
    t = torch.tensor(values, dtype=torch.float64)
    return hvd.allreduce(t, name=name, op=hvd.Max).tolist()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tensors", type=int, default=100)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    if args.smoke:
        args.iters, args.steps = 3, 3
    torch.set_num_threads(1)
    hvd.init()
    n, rank = hvd.size(), hvd.rank()
    bad = 0

    # Synchronous 8-byte allreduces, each timed from the end of the previous call (the loop's own
    # cost included, as the named row always was), after `skip` untimed calls.
    x = torch.tensor([1.0, 2.0])

    def sync_loop(names, skip):
        out = []
        t0 = time.perf_counter()
        for nm in names:
            y = hvd.allreduce(x, name=nm, op=hvd.Sum)
            t1 = time.perf_counter()
            out.append(t1 - t0)
            t0 = t1
        return out[skip:], int((y != x * n).sum())

    lat, wrong = sync_loop(["lat8"] * (args.iters + 100), 100)
    bad += wrong
    unnamed, wrong = sync_loop([None] * (args.iters + 100), 100)
    bad += wrong
    # More calls than the cache holds (1024 by default) before timing: fresh names at capacity.
    fresh, wrong = sync_loop([f"lat8.{i}" for i in range(args.iters + 1200)], 1200)
    bad += wrong

    # 100 x 1 KiB async allreduces, then wait on all.
    tensors = [torch.full((256,), float(rank + 1 + j % 3)) for j in range(args.tensors)]
    names = [f"step.{j}" for j in range(args.tensors)]

    def step(ts):
        start = time.perf_counter()
        handles = [hvd.allreduce_async_(t, name=nm, op=hvd.Sum) for t, nm in zip(ts, names)]
        enqueued = time.perf_counter()
        for h in handles:
            hvd.synchronize(h)
        return start, enqueued, time.perf_counter()

    def step_ready(ts):
        handles = [hvd.allreduce_async_(t, name=nm, op=hvd.Sum) for t, nm in zip(ts, names)]
        for h in handles:
            while not hvd.poll(h):
                time.sleep(20e-6)
        start = time.perf_counter()
        for h in handles:
            hvd.synchronize(h)
        return time.perf_counter() - start

    tri = n * (n + 1) / 2

    def check(work):
        return sum(int((t != tri + n * (j % 3)).sum()) for j, t in enumerate(work))

    for _ in range(min(args.steps, 20)):
        step([t.clone() for t in tensors])
        step_ready([t.clone() for t in tensors])
    steps, enq, sync, ready = [], [], [], []
    for _ in range(args.steps):
        work = [t.clone() for t in tensors]  # allreduce_async_ is in place; start from fresh inputs
        start, enqueued, done = step(work)
        steps.append(done - start)
        enq.append((enqueued - start) / args.tensors)
        sync.append((done - enqueued) / args.tensors)
        bad += check(work)
        work = [t.clone() for t in tensors]
        ready.append(step_ready(work) / args.tensors)
        bad += check(work)

    # Back to back, as a training loop runs them and as the C++ harness times allreduce_batch
    # (consecutive steps, no barrier or refill between them, so a step also absorbs the ranks'
    # skew). hvd.Average in place keeps the values fixed from the second step on: no fresh
    # inputs are needed, and the final check still sees every step's result.
    work = [t.clone() for t in tensors]
    b2b_names = [f"b2b.{j}" for j in range(args.tensors)]

    def step_average():
        handles = [hvd.allreduce_async_(t, name=nm, op=hvd.Average) for t, nm in zip(work, b2b_names)]
        for h in handles:
            hvd.synchronize(h)

    def step_grouped():
        hvd.synchronize(hvd.grouped_allreduce_async_(work, name="grouped", op=hvd.Average))

    def back_to_back(one_step):
        for _ in range(min(args.steps, 20)):
            one_step()
        times = []
        t0 = time.perf_counter()
        for _ in range(args.steps):
            one_step()
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1
        return times

    b2b = back_to_back(step_average)
    grouped = back_to_back(step_grouped)
    mean = (n + 1) / 2
    bad += sum(int(((t - (mean + j % 3)).abs() > 1e-5).sum()) for j, t in enumerate(work))

    lat = max_over_ranks(lat, "stats.lat")
    unnamed = max_over_ranks(unnamed, "stats.unnamed")
    fresh = max_over_ranks(fresh, "stats.fresh")
    b2b = max_over_ranks(b2b, "stats.b2b")
    steps = max_over_ranks(steps, "stats.steps")
    enq = max_over_ranks(enq, "stats.enq")
    sync = max_over_ranks(sync, "stats.sync")
    ready = max_over_ranks(ready, "stats.ready")
    grouped = max_over_ranks(grouped, "stats.grouped")
    bad = int(max_over_ranks([bad], "stats.bad")[0])
    if rank == 0:
        print(f"# py_latency_bench ranks={n} iters={args.iters} steps={args.steps} tensors={args.tensors} "
              f"torch={torch.__version__}" + (" smoke=1" if args.smoke else ""))
        print("#%23s %12s %12s" % ("metric", "p50_us", "p99_us"))
        for name, v in (("sync_allreduce_8B", lat), ("sync_8B_unnamed", unnamed),
                        ("sync_8B_fresh_names", fresh), (f"step_{args.tensors}x1KiB", b2b),
                        (f"step_{args.tensors}x1KiB_fresh", steps),
                        ("enqueue_per_call", enq), ("synchronize_per_call", sync),
                        ("sync_ready_per_call", ready), (f"grouped_{args.tensors}x1KiB", grouped)):
            print("%24s %12.2f %12.2f" % (name, percentile(v, 50) * 1e6, percentile(v, 99) * 1e6))
        pair = (percentile(enq, 50) + percentile(ready, 50)) * 1e6
        print(f"# python cost per allreduce_async_+synchronize pair (enqueue + sync_ready p50): "
              f"{pair:.2f} us")
        print(f"# load average at end: {' '.join('%.2f' % x for x in os.getloadavg())}")
        print(f"# check={'OK' if bad == 0 else 'WRONG'}")
    hvd.shutdown()
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
