#!/usr/bin/env python3
"""The torch.distributed (gloo backend) peer: the collective harness of bench/harness in Python.

Same flags, sizes, data patterns, statistics and row format as hvd_bench and mpi_bench, so
bench/compare can put the rows side by side:

    python3 bench/peers/torch_gloo_bench.py --np 2 -o allreduce -b 4 -e 256M -f 4

With --np it starts the ranks itself (torch.multiprocessing, rendezvous on 127.0.0.1); under a
launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun) it joins that job instead.

torch's collectives are in place (all_reduce, broadcast), so the timed loop runs them on one
working buffer, and the correctness check is a separate, untimed run from fresh inputs.
"""
import argparse
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {
    "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
OPS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "allreduce_batch")


def parse_size(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(text)


def percentile(values, p):
    values = sorted(values)
    rank = math.ceil(p / 100.0 * len(values))
    return values[min(len(values) - 1, max(rank, 1) - 1)]


class Row:
    """One collective at one size: shape, fill, run, check (as bench/harness/collectives.cc)."""

    def __init__(self, op, nbytes, dtype, rank, n, root, batch):
        self.op, self.dtype, self.rank, self.n, self.root, self.batch = op, dtype, rank, n, root, batch
        elem = torch.tensor([], dtype=dtype).element_size()
        if op in ("allreduce", "broadcast", "allreduce_batch"):
            self.count = nbytes // elem
            self.reported = self.count * elem * (batch if op == "allreduce_batch" else 1)
        else:
            self.count = nbytes // elem // n
            self.reported = self.count * n * elem
        self.bus = {"allreduce": 2.0 * (n - 1) / n, "allreduce_batch": 2.0 * (n - 1) / n,
                    "broadcast": 1.0}.get(op, (n - 1) / n)
        self.works = []

    def _pattern(self, values):
        return values.to(self.dtype)

    def fill(self):
        r, n, c = self.rank, self.n, self.count
        i = torch.arange(c * (n if self.op in ("alltoall", "reducescatter") else 1), dtype=torch.int64)
        if self.op == "allreduce":
            self.inp = self._pattern((r + 1) * (i % 5 + 1))
        elif self.op == "allreduce_batch":
            self.inps = [self._pattern((r + 1) * ((i + j) % 5 + 1)) for j in range(self.batch)]
        elif self.op == "allgather":
            self.inp = self._pattern((r * 7 + i) % 61 + 1)
            self.out = torch.zeros(c * n, dtype=self.dtype)
        elif self.op == "broadcast":
            self.inp = self._pattern((i * 3 + self.root) % 83 + 1) if r == self.root else \
                torch.zeros(c, dtype=self.dtype)
        elif self.op == "alltoall":
            self.inp = self._pattern((r * 13 + (i // c) * 3 + i % c) % 59 + 1)
            self.out = torch.zeros(c * n, dtype=self.dtype)
        elif self.op == "reducescatter":
            self.inp = self._pattern((r + 1) * (i % 5 + 1))
            self.out = torch.zeros(c, dtype=self.dtype)

    def run(self):
        op = self.op
        if op == "allreduce":
            dist.all_reduce(self.inp)
        elif op == "allreduce_batch":
            works = [dist.all_reduce(t, async_op=True) for t in self.inps]
            for w in works:
                w.wait()
        elif op == "allgather":
            dist.all_gather_into_tensor(self.out, self.inp)
        elif op == "broadcast":
            dist.broadcast(self.inp, self.root)
        elif op == "alltoall":
            dist.all_to_all_single(self.out, self.inp)
        elif op == "reducescatter":
            dist.reduce_scatter_tensor(self.out, self.inp)

    def check(self):
        """Number of wrong elements after one run from fresh inputs."""
        self.fill()
        self.run()
        r, n, c = self.rank, self.n, self.count
        t = n * (n + 1) // 2
        i = torch.arange(c * (n if self.op in ("allgather", "alltoall") else 1), dtype=torch.int64)
        if self.op == "allreduce":
            got, want = self.inp, t * (i % 5 + 1)
        elif self.op == "allreduce_batch":
            return sum(int((self.inps[j].to(torch.float64) != (t * ((i + j) % 5 + 1)).double()).sum())
                       for j in range(self.batch))
        elif self.op == "allgather":
            got, want = self.out, ((i // c) * 7 + i % c) % 61 + 1
        elif self.op == "broadcast":
            got, want = self.inp, (i * 3 + self.root) % 83 + 1
        elif self.op == "alltoall":
            got, want = self.out, ((i // c) * 13 + r * 3 + i % c) % 59 + 1
        else:
            got, want = self.out, t * ((r * c + i) % 5 + 1)
        return int((got.to(torch.float64) != want.double()).sum())


def max_over_ranks(values):
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def bench(args, rank, n):
    dtype = DTYPES[args.d]
    lead = rank == 0
    if lead:
        print(f"# system=torch-gloo op={args.o} dtype={args.d} ranks={n} warmup={args.w} "
              f"iters={args.n or 'auto'} torch={torch.__version__} threads={torch.get_num_threads()}"
              + (f" k={args.k}" if args.o == "allreduce_batch" else "") + (" smoke=1" if args.smoke else ""))
        print("#%11s %12s %9s %6s %5s %12s %12s %10s %10s %6s %6s" % (
            "size", "count", "type", "redop", "root", "time_med_us", "time_p99_us", "algbw_GBps",
            "busbw_GBps", "check", "iters"))
        sys.stdout.flush()
    wrong_rows = 0
    nominal = float(args.b)
    while nominal <= args.e * 1.0000001:
        row = Row(args.o, int(nominal), dtype, rank, n, args.r % n, args.k)
        nominal *= args.f
        if row.count == 0:
            continue
        row.fill()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.w):
            row.run()
        iters = args.n
        if iters == 0:
            per_iter = max_over_ranks([(time.perf_counter() - start) / args.w if args.w else 1e-3])[0]
            iters = int(min(max(0.25 / max(per_iter, 1e-9), 20), 2000))
        times = [0.0] * iters
        dist.barrier()
        start = time.perf_counter()
        for it in range(iters):
            row.run()
            now = time.perf_counter()
            times[it] = now - start
            start = now
        bad = 0
        for _ in range(iters if args.smoke else 1):
            bad += row.check()
        bad = max_over_ranks([bad])[0]
        times = max_over_ranks(times)
        med, p99 = percentile(times, 50) * 1e6, percentile(times, 99) * 1e6
        algbw = row.reported / (med * 1e-6) / 1e9 if med > 0 else 0.0
        wrong_rows += bad != 0
        if lead:
            redop = "sum" if "reduce" in args.o else "none"
            root = str(row.root) if args.o == "broadcast" else "-"
            print("%12d %12d %9s %6s %5s %12.2f %12.2f %10.3f %10.3f %6s %6d" % (
                row.reported, row.count, args.d, redop, root, med, p99, algbw, algbw * row.bus,
                "OK" if bad == 0 else "WRONG", iters))
            sys.stdout.flush()
    if lead:
        print(f"# rows_wrong={wrong_rows}")
    return wrong_rows


def worker(rank, n, args, port, results):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    wrong = bench(args, rank, n)
    dist.destroy_process_group()
    results[rank] = wrong


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", default="allreduce", choices=OPS)
    p.add_argument("-d", default="float32", choices=sorted(DTYPES))
    p.add_argument("-b", default="4", type=parse_size)
    p.add_argument("-e", default="256M", type=parse_size)
    p.add_argument("-f", default=4.0, type=float)
    p.add_argument("-n", default=0, type=int, help="timed iterations (0 = auto, >= 20)")
    p.add_argument("-w", default=5, type=int)
    p.add_argument("-r", default=0, type=int, help="broadcast root")
    p.add_argument("-k", default=100, type=int, help="allreduce_batch: tensors per step")
    p.add_argument("--np", type=int, default=0, help="start this many ranks here")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    if args.smoke:
        args.n, args.w = 2, 1
        if "-b" not in sys.argv:
            args.b, args.e, args.f = 4, 64 << 10, max(args.f, 16.0)
    if args.np:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        results = mp.Manager().dict()
        mp.spawn(worker, args=(args.np, args, port, results), nprocs=args.np, join=True)
        return 1 if any(results.values()) else 0
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    wrong = bench(args, rank, n)
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
