#!/usr/bin/env python3
"""DeepSpeed's CPU shared-memory allreduce beside Horovod's, in one job, alternating.

DeepSpeed's `inference_all_reduce` (its `shm_comm` op: every rank on one host, fp32/bf16/fp16
sum, in place) is the fastest CPU allreduce we know of. This runs it and Horovod in the same
processes, size by size, in rotating order, so that both see the same machine load:

  ours        hvd.allreduce_(t, op=hvd.Sum, name=...)   synchronous, in place (horovod.torch)
  ds_raw      torch.ops.deepspeed.inference_all_reduce_(t)   DeepSpeed's raw op
  ds_public   deepspeed.comm.inference_all_reduce(t)         DeepSpeed's public call

Setup, once (DeepSpeed in its own venv; its op compiles on first use, about a minute):

    python3 -m venv /tmp/venv-ds
    /tmp/venv-ds/bin/pip install torch==2.13.0 && DS_BUILD_OPS=0 /tmp/venv-ds/bin/pip install deepspeed==0.19.8
    /tmp/venv-ds/bin/pip install --no-build-isolation .        # this project, same venv

Run (2 ranks on one host; DeepSpeed's shared memory needs LOCAL_SIZE = world size, set here):

    horovodrun -np 2 /tmp/venv-ds/bin/python bench/peers/deepspeed_shm.py [--reps 9] [--smoke]

Prints one row per size and implementation: per-call time (max over ranks of each repetition's
mean), min / median / max over repetitions, and the peer's median over ours (> 1: ours faster);
then each rank's allowed CPUs and the CPU it ended on (placement matters on a shared VM). Every
implementation's result is checked before it is timed. DeepSpeed's shared-memory files
(/dev/shm/deepspeed_allreduce_buffer_*) are removed at exit.
"""
import argparse
import glob
import os
import statistics
import sys
import time

import torch

import horovod.torch as hvd

SIZES = "4K,16K,64K,256K,1M,4M,16M,64M,256M"


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def current_cpu():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])  # field 39: the CPU it last ran on


def start_deepspeed(n, rank, port):
    # DeepSpeed reads these at import / init: the CPU accelerator, torch.distributed's rendezvous,
    # and LOCAL_SIZE, which must equal the world size for its shared-memory path.
    os.environ.update({"DS_ACCELERATOR": "cpu", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
                       "LOCAL_SIZE": str(n)})
    import deepspeed
    import deepspeed.comm as dist
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    if not (hasattr(torch.ops, "deepspeed") and hasattr(torch.ops.deepspeed, "inference_all_reduce_")):
        sys.exit("DeepSpeed's shm_comm op did not build: no torch.ops.deepspeed.inference_all_reduce_")
    return dist


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=SIZES, help="comma list of message sizes (bytes, K, M, G)")
    p.add_argument("--reps", type=int, default=9, help="repetitions per size and implementation")
    p.add_argument("--bytes-per-rep", default="64M", help="data moved per repetition (sets iterations)")
    p.add_argument("--port", type=int, default=29517, help="torch.distributed port for DeepSpeed")
    p.add_argument("--smoke", action="store_true", help="two small sizes, 2 repetitions")
    args = p.parse_args()
    if args.smoke:
        args.sizes, args.reps, args.bytes_per_rep = "4K,64K", 2, "1M"
    torch.set_num_threads(1)
    hvd.init()
    n, rank = hvd.size(), hvd.rank()
    if hvd.local_size() != n:
        sys.exit("deepspeed_shm.py: every rank must be on one host (DeepSpeed's shared memory)")
    dist = start_deepspeed(n, rank, args.port)
    impls = {
        "ours": lambda t, name: hvd.allreduce_(t, op=hvd.Sum, name=name),
        "ds_raw": lambda t, name: torch.ops.deepspeed.inference_all_reduce_(t),
        "ds_public": lambda t, name: dist.inference_all_reduce(t, op=dist.ReduceOp.SUM),
    }
    per_rep = parse_size(args.bytes_per_rep)
    rows = []
    try:
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            count = size // 4
            names = list(impls)
            for impl in names:  # check each before timing it
                t = torch.full((count,), float(rank + 1))
                impls[impl](t, "check.%d" % size)
                if not bool((t == n * (n + 1) / 2).all()):
                    sys.exit("%s gave a wrong sum at %d bytes" % (impl, size))
            iters = max(20, min(5000, per_rep // size))
            times = {impl: [] for impl in names}
            t = torch.zeros(count)  # zeros: repeated in-place sums stay bounded
            for rep in range(args.reps):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for impl in order:
                    fn, name = impls[impl], "bench.%d" % size
                    for _ in range(3):
                        fn(t, name)
                    hvd.barrier()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        fn(t, name)
                    mean = (time.perf_counter() - t0) / iters
                    times[impl].append(hvd.allreduce(torch.tensor([mean], dtype=torch.float64),
                                                     op=hvd.Max, name="time").item())
            ours = statistics.median(times["ours"])
            for impl in names:
                v = times[impl]
                rows.append((size, impl, min(v), statistics.median(v), max(v), statistics.median(v) / ours))
        placement = hvd.allgather_object((rank, sorted(os.sched_getaffinity(0)), current_cpu()))
    finally:
        hvd.barrier()
        if rank == 0:
            for path in glob.glob("/dev/shm/deepspeed_allreduce_buffer_%d_*" % os.getuid()):
                try:
                    os.unlink(path)
                except OSError:
                    pass
    if rank == 0:
        print("# deepspeed_shm ranks=%d reps=%d torch=%s fp32 sum in place" % (n, args.reps, torch.__version__))
        print("%10s %10s %11s %11s %11s %12s" % ("bytes", "impl", "min_us", "median_us", "max_us", "median/ours"))
        for size, impl, lo, med, hi, ratio in rows:
            print("%10d %10s %11.2f %11.2f %11.2f %12.2f" % (size, impl, lo * 1e6, med * 1e6, hi * 1e6, ratio))
        for r, cpus, cpu in placement:
            print("# rank %d: allowed CPUs %s, last ran on CPU %d" % (r, cpus, cpu))
        print("# load average at end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
