#!/usr/bin/env python3
"""End-to-end training throughput: horovod.torch beside PyTorch DDP (gloo), same model, batch,
ranks and threads, in the manner of Horovod's pytorch_synthetic_benchmark (random data, the
metric is samples per second over all ranks).

    python3 bench/torch_e2e.py --np 2 --models cnn,mlp --reps 3     # prints the ratios
    python3 bench/torch_e2e.py --smoke                               # 2 steps each, no timing

Models: `cnn`, a small convolutional net on 3x32x32 images (~0.24 M parameters), and `mlp`, a
4-layer perceptron of ~50 M parameters (200 MB of float32 gradients per step). Each rank uses
one intra-op thread. The systems run interleaved (horovod, ddp, horovod, ...) and the ratio is
of the medians over repetitions.

Systems (--systems): `horovod` (DistributedOptimizer as configured by the environment: gradient
buckets by default), `horovod-nobuckets` (the same with HOROVOD_DISABLE_GRADIENT_BUCKETS=1, the
per-gradient path), `horovod-unshared` (buckets in ordinary memory, HOROVOD_DISABLE_SHARED_BUCKETS=1),
`horovod-bgthread` (HOROVOD_CALLER_PROGRESS_US=0: the background thread runs every operation, no
waiting thread drives the engine), `horovod-nohugepages` (HOROVOD_MALLOC_HUGEPAGES=0: horovodrun
leaves glibc's malloc as it is, see below), `horovod-timeline` (rank 0 writes a timeline with cycle
marks to $TMPDIR/hvd_e2e_timeline.json: its overhead beside `horovod`) and `ddp-gloo`; `nocomm`
is the roof: the same ranks training under horovodrun with the plain optimizer, no gradient communication at all.
`nocomm-align` is `nocomm` with the ranks aligned before each optimizer step (an 8-byte
allreduce: no rank steps before every rank's gradients are final), the synchronisation that any
synchronous data-parallel step pays, with no gradient moved: the roof of synchronous training.
`nocomm-copy` is `nocomm-align` plus work of the size of the least that a synchronous 2-rank
allreduce adds, done on the training thread: every gradient copied once with torch (such an
allreduce reads each input and writes each output at least once, one copy's memory traffic a
rank). It is a reference, not a strict bound: torch's copy writes through the caches, where
the engine's reduction streams its stores.
`ddp-gloo-hugepages` is DDP given what horovodrun gives its workers by default,
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (huge pages for large malloc blocks: autograd's fresh
gradient tensors fault once per 2 MiB instead of once per 4 KiB). Each horovod variant gets a
ratio against each DDP system run.

--malloc-tuned gives every rank of every system (DDP's too) glibc's MALLOC_MMAP_MAX_=0 and a huge
MALLOC_TRIM_THRESHOLD_: freed large blocks are reused instead of unmapped and mapped again, so
the ~50k page faults per step of the MLP's fresh gradient tensors (autograd's, for both systems)
disappear. It changes the compute side for everyone alike; the default is glibc's behaviour.

Horovod's ranks start under horovodrun (--horovodrun, or build/launcher/horovodrun, or PATH);
DDP's under torch.multiprocessing with a TCP rendezvous on 127.0.0.1.
"""
import argparse
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import tempfile
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_model(name):
    import torch.nn as nn
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(128, 10))
    if name == "mlp":
        return nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 2048))
    raise ValueError(name)


def batch_for(name, batch):
    import torch
    g = torch.Generator().manual_seed(0)
    if name == "cnn":
        return torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    return torch.randn(batch, 2048, generator=g), torch.randint(0, 2048, (batch,), generator=g)


def train_loop(model, optimizer, data, target, warmup, steps, sync, before_step=None):
    """Returns (seconds, CPU seconds of the whole process) for `steps` steps after `warmup`."""
    import torch.nn.functional as F

    def one():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        if before_step:
            before_step()
        optimizer.step()

    for _ in range(warmup):
        one()
    sync()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        one()
    sync()
    return time.perf_counter() - start, time.process_time() - cpu


def worker_horovod(args):
    import torch
    import horovod.torch as hvd
    torch.set_num_threads(args.threads)
    hvd.init()
    torch.manual_seed(1234)
    model = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    nocomm = os.environ.get("HVD_E2E_NOCOMM")
    before_step = None
    if nocomm is None:
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    elif nocomm == "copy":
        before_step = copy_reference_hooks(model, hvd)
    elif nocomm == "align":
        before_step = alignment(hvd)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    data, target = batch_for(args.model, args.batch)
    elapsed, cpu = train_loop(model, optimizer, data, target, args.warmup, args.steps,
                              lambda: hvd.allreduce(torch.zeros(1), name="e2e.sync"), before_step)
    elapsed = hvd.allreduce(torch.tensor([elapsed]), name="e2e.elapsed", op=hvd.Max).item()
    cpu = hvd.allreduce(torch.tensor([cpu]), name="e2e.cpu", op=hvd.Average).item()
    report("horovod", args, hvd.rank(), hvd.size(), elapsed, cpu)
    hvd.shutdown()


def copy_reference_hooks(model, hvd):
    """`nocomm-copy`: each gradient is copied into a buffer of its own as soon as it is final (on
    the training thread, like the hook's work in a real system), and the returned callable
    aligns the ranks before the optimizer step."""
    import torch

    def hook(p, buf):
        buf.copy_(p.grad)

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p, buf=torch.empty_like(p): hook(p, buf))
    return alignment(hvd)


def alignment(hvd):
    """A callable that returns once every rank has called it (an 8-byte allreduce)."""
    import torch
    align = torch.zeros(2)
    return lambda: hvd.allreduce_(align, name="e2e.align")


def ddp_rank(rank, args, port):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.np)
    torch.manual_seed(1234)
    model = torch.nn.parallel.DistributedDataParallel(build_model(args.model))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * args.np)
    data, target = batch_for(args.model, args.batch)
    elapsed, cpu = train_loop(model, optimizer, data, target, args.warmup, args.steps, dist.barrier)
    t = torch.tensor([elapsed])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    c = torch.tensor([cpu])
    dist.all_reduce(c)
    report("ddp-gloo", args, rank, args.np, t.item(), c.item() / args.np)
    dist.destroy_process_group()


def report(system, args, rank, size, elapsed, cpu):
    """`cpu`: CPU seconds of one rank's process over the timed steps (the mean over ranks)."""
    if rank == 0:
        rate = args.batch * size * args.steps / elapsed
        print(f"RESULT {system} {args.model} {rate:.3f} samples/s ranks={size} batch={args.batch} "
              f"steps={args.steps} threads={args.threads} cpu_ms_per_step={cpu * 1e3 / args.steps:.2f}",
              flush=True)


def worker_ddp(args):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_rank, args=(args, port), nprocs=args.np, join=True)


def find_horovodrun(args):
    if args.horovodrun:
        return args.horovodrun
    for d in (args.build_dir, os.path.join(ROOT, args.build_dir)):
        path = os.path.join(d, "launcher", "horovodrun")
        if os.path.exists(path):
            return os.path.abspath(path)
    return shutil.which("horovodrun")


HOROVOD_SYSTEMS = {"horovod": {}, "horovod-nobuckets": {"HOROVOD_DISABLE_GRADIENT_BUCKETS": "1"},
                   "horovod-unshared": {"HOROVOD_DISABLE_SHARED_BUCKETS": "1"},
                   "horovod-bgthread": {"HOROVOD_CALLER_PROGRESS_US": "0"},
                   "horovod-nohugepages": {"HOROVOD_MALLOC_HUGEPAGES": "0"},
                   "horovod-timeline": {"HOROVOD_TIMELINE": os.path.join(tempfile.gettempdir(),
                                                                         "hvd_e2e_timeline.json"),
                                        "HOROVOD_TIMELINE_MARK_CYCLES": "1"},
                   "nocomm": {"HVD_E2E_NOCOMM": "1"}, "nocomm-align": {"HVD_E2E_NOCOMM": "align"},
                   "nocomm-copy": {"HVD_E2E_NOCOMM": "copy"}}
# DDP as a user starts it (glibc's defaults), and with the malloc tunable horovodrun sets.
PEERS = {"ddp-gloo": {}, "ddp-gloo-hugepages": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}}
MALLOC_TUNED_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def run_system(system, model, args):
    common = ["--model", model, "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
              str(args.warmup), "--threads", str(args.threads), "--np", str(args.np)]
    me = os.path.abspath(__file__)
    env = dict(os.environ)
    if args.malloc_tuned:
        env.update(MALLOC_TUNED_ENV)
    if system in HOROVOD_SYSTEMS:
        env.update(HOROVOD_SYSTEMS[system])
        run = find_horovodrun(args)
        if not run:
            raise SystemExit("torch_e2e: horovodrun not found (--horovodrun PATH)")
        argv = [run, "-np", str(args.np), sys.executable, me, "--worker", "horovod"] + common
    else:
        env.update(PEERS[system])
        argv = [sys.executable, me, "--worker", "ddp"] + common
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, env=env)
    for line in (proc.stdout + proc.stderr).splitlines():
        if "RESULT " in line:
            parts = line[line.index("RESULT "):].split()
            fields = dict(p.split("=", 1) for p in parts if "=" in p)
            return float(parts[3]), float(fields["cpu_ms_per_step"])
    sys.stderr.write(f"torch_e2e: {system} {model} failed (exit {proc.returncode}):\n$ "
                     + " ".join(shlex.quote(a) for a in argv) + "\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    return None, None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--models", default="cnn,mlp")
    p.add_argument("--systems", default="horovod,ddp-gloo",
                   help="comma list of " + ", ".join(list(HOROVOD_SYSTEMS) + list(PEERS)) +
                        " (run in this order)")
    p.add_argument("--model", default="cnn", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--malloc-tuned", action="store_true",
                   help="glibc never unmaps freed blocks, for every system (see above)")
    p.add_argument("--worker", choices=("horovod", "ddp"), help=argparse.SUPPRESS)
    p.add_argument("--build-dir", default=os.environ.get("HVD_BUILD_DIR", "build"))
    p.add_argument("--horovodrun", default=None)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default=None, help="also write the table to this Markdown file")
    args = p.parse_args()
    if args.worker == "horovod":
        return worker_horovod(args)
    if args.worker == "ddp":
        return worker_ddp(args)
    if args.smoke:
        args.steps, args.warmup, args.reps, args.batch = 2, 1, 1, 4
    systems = args.systems.split(",")
    for system in systems:
        if system not in HOROVOD_SYSTEMS and system not in PEERS:
            raise SystemExit(f"torch_e2e: unknown system {system!r}")
    results, cpu_ms = {}, {}
    failed = False
    for model in args.models.split(","):
        for rep in range(args.reps):
            for system in systems:
                rate, cpu = run_system(system, model, args)
                print(f"[{model} rep {rep + 1}/{args.reps}] {system}: {rate} samples/s, "
                      f"{cpu} CPU ms a step a rank", file=sys.stderr, flush=True)
                failed |= rate is None
                if rate is not None:
                    results.setdefault((model, system), []).append(rate)
                    cpu_ms.setdefault((model, system), []).append(cpu)
    ours = [s for s in systems if s in HOROVOD_SYSTEMS]
    peers = [s for s in systems if s in PEERS]
    pairs = [(s, peer) for peer in peers for s in ours]
    header = "| model | " + " | ".join(f"{s} samples/s" for s in systems)
    header += "".join(f" | {s} / {peer}" for s, peer in pairs) + " |"
    lines = [f"# torch end-to-end, {args.np} ranks x {args.threads} thread, batch {args.batch} per rank, "
             f"{args.steps} steps, median of {args.reps} interleaved runs", "",
             "Command: `python3 bench/torch_e2e.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]) + "`", "",
             header, "|" + "---|" * (header.count("|") - 1)]
    for model in args.models.split(","):
        med = {}
        cells = []
        for s in systems:
            r = results.get((model, s))
            med[s] = statistics.median(r) if r else None
            cells.append(f"{med[s]:.1f} ({', '.join(f'{x:.0f}' for x in r)})" if r else "-")
        for s, peer in pairs:
            cells.append(f"{med[s] / med[peer]:.2f}x" if med[s] and med[peer] else "-")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    # Where the time goes on a host whose CPUs are all busy: a system's CPU time per step beyond
    # nocomm-align's is what its exchange costs (the engine's threads, gloo's, the hooks).
    header = "| model | " + " | ".join(f"{s} CPU ms" for s in systems) + " |"
    lines += ["", "CPU time per step per rank (process CPU over the timed steps, mean over ranks):", "",
              header, "|" + "---|" * (header.count("|") - 1)]
    for model in args.models.split(","):
        cells = [f"{statistics.median(c):.1f}" if (c := cpu_ms.get((model, s))) else "-" for s in systems]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: median (each run, in run order); CPU: median." +
              (" Every rank ran with " + " ".join(f"{k}={v}" for k, v in MALLOC_TUNED_ENV.items()) + "."
               if args.malloc_tuned else ""),
              f"Load average (1 min) at the end: {os.getloadavg()[0]:.1f}."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
