#!/usr/bin/env python3
"""Autotune against an exhaustive grid over the same knobs, on two workloads, in one window.

    python3 bench/autotune_bench.py --reps 3 --out bench/results/autotune.md --png bench/results/autotune.png

Workloads (2 ranks under horovodrun, one intra-op thread each):
  mlp       the torch end-to-end MLP of bench/torch_e2e.py (~50 M parameters, batch 32 per rank,
            DistributedOptimizer with its default gradient buckets)
  synth160  a synthetic step of 160 named float32 allreduces, sizes spread log-uniformly from
            64 B to 256 KiB (~5 MB a step), enqueued in reverse order as a backward pass would,
            then waited for; no compute

Each run is one training job with HOROVOD_AUTOTUNE=1: strategy `bayes` (Bayesian optimisation,
20 scored samples) or `grid` (HOROVOD_AUTOTUNE_STRATEGY=grid: every combination of
--grid-points values per knob, 2 for on/off knobs). Both measure samples the same way (the
engine's own score, bytes reduced per second, over --steps-per-sample steps after the same
warmup) over the same free knobs; the knobs a workload does not search are pinned by setting
them explicitly (to their defaults). The runs alternate (bayes, grid, bayes, grid, ...). After
the tuner settles, every worker times --after-steps more steps at the chosen setting.

Reported per workload, median over repetitions: the best score bayes measured within its 20
samples, the best the grid measured, their ratio (the goal is >= 0.95), the default setting's
score (each run's sample 0), and the re-measured throughput after settling.
"""
import argparse
import csv
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Knobs pinned per workload (set explicitly to their defaults, so neither strategy searches
# them); every other tunable knob is free.
PINS = {
    # The MLP's gradients travel as a few large buckets and its steps are slow (~0.4 s): the
    # request batching window and the background thread's park hardly matter, and a 4-knob grid
    # keeps a run within minutes.
    "mlp": {"HOROVOD_BURST_QUIET_US": "2", "HOROVOD_CALLER_PROGRESS_US": "200"},
    # Many small tensors: every knob may matter.
    "synth160": {},
}

WORKER = r'''
import os, sys, time
import torch
import horovod.torch as hvd
sys.path.insert(0, os.path.join(os.environ["HVD_BENCH_ROOT"], "bench"))
torch.set_num_threads(1)
hvd.init()
workload = os.environ["HVD_BENCH_WORKLOAD"]
log = os.environ["HOROVOD_AUTOTUNE_LOG"]
after = int(os.environ["HVD_BENCH_AFTER"])
max_steps = int(os.environ["HVD_BENCH_MAX_STEPS"])
if workload == "mlp":
    import torch_e2e
    import torch.nn.functional as F
    torch.manual_seed(1234)
    model = torch_e2e.build_model("mlp")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    data, target = torch_e2e.batch_for("mlp", 32)
    step_bytes = sum(p.numel() * 4 for p in model.parameters())
    def step():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()
else:
    sizes = [int(round(16 * 4096 ** (i / 159))) for i in range(160)]
    tensors = [torch.ones(n) for n in sizes]
    step_bytes = sum(n * 4 for n in sizes)
    def step():
        handles = [hvd.allreduce_async_(tensors[i], name="synth.%d" % i, op=hvd.Sum) for i in reversed(range(160))]
        for h in handles:
            hvd.synchronize(h)
        for t in tensors:
            t.fill_(1.0)

def settled():
    if hvd.rank() != 0:
        return 0.0
    try:
        with open(log) as f:
            return 1.0 if ",final," in f.read() else 0.0
    except OSError:
        return 0.0

flag = torch.zeros(1)
steps = 0
while steps < max_steps:
    step()
    steps += 1
    if steps % 5 == 0:
        flag.fill_(settled())
        if hvd.allreduce(flag, name="bench.settled", op=hvd.Max).item() > 0:
            break
step()  # the first step at the final setting
hvd.allreduce(torch.zeros(1), name="bench.sync")
start = time.perf_counter()
for _ in range(after):
    step()
hvd.allreduce(torch.zeros(1), name="bench.sync")
elapsed = hvd.allreduce(torch.tensor([time.perf_counter() - start]), name="bench.elapsed", op=hvd.Max).item()
if hvd.rank() == 0:
    print("RESULT steps=%d after_bytes_per_sec=%.6g" % (steps, step_bytes * after / elapsed), flush=True)
'''


def find_horovodrun(build_dir):
    for d in (build_dir, os.path.join(ROOT, build_dir)):
        path = os.path.join(d, "launcher", "horovodrun")
        if os.path.exists(path):
            return os.path.abspath(path)
    return shutil.which("horovodrun")


def read_log(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    samples = [r for r in rows if r["phase"] == "sample"]
    final = [r for r in rows if r["phase"] == "final"]
    return samples, (final[0] if final else None)


def run_once(args, hvdrun, workload, strategy, log):
    env = dict(os.environ)
    env.update({
        "HVD_BENCH_ROOT": ROOT, "HVD_BENCH_WORKLOAD": workload, "HVD_BENCH_AFTER": str(args.after_steps),
        "HVD_BENCH_MAX_STEPS": str(args.max_steps),
        "HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log, "HOROVOD_AUTOTUNE_STRATEGY": strategy,
        "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": str(args.warmup_samples),
        "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": str(args.steps_per_sample[workload]),
        "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(args.max_samples),
        "HOROVOD_AUTOTUNE_GRID_POINTS": str(args.grid_points),
    })
    env.update(PINS[workload])
    cmd = [hvdrun, "-np", "2", sys.executable, "-c", WORKER]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError("run failed (%s %s):\n%s\n%s" % (workload, strategy, r.stdout[-3000:], r.stderr[-3000:]))
    after = None
    for line in r.stdout.splitlines():
        if "RESULT" in line:
            after = float(line.split("after_bytes_per_sec=")[1])
    samples, final = read_log(log)
    scores = [float(s["score_bytes_per_sec"]) for s in samples]
    return {"scores": scores, "best": max(scores), "default": scores[0], "after": after, "final": final,
            "wall": wall, "samples": len(scores)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="synth160,mlp")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-samples", type=int, default=20)
    p.add_argument("--warmup-samples", type=int, default=2)
    p.add_argument("--grid-points", type=int, default=3)
    p.add_argument("--after-steps", type=int, default=20)
    p.add_argument("--max-steps", type=int, default=20000)
    p.add_argument("--build-dir", default=os.environ.get("HVD_BUILD_DIR", "build"))
    p.add_argument("--timeout", type=float, default=3000)
    p.add_argument("--out", default=None)
    p.add_argument("--png", default=None)
    args = p.parse_args()
    args.steps_per_sample = {"synth160": 5, "mlp": 3}
    hvdrun = find_horovodrun(args.build_dir)
    if hvdrun is None:
        sys.exit("horovodrun not found")
    tmp = tempfile.mkdtemp(prefix="hvd-autotune-bench-")
    results = {}
    for workload in args.workloads.split(","):
        results[workload] = {"bayes": [], "grid": []}
        for rep in range(args.reps):
            for strategy in ("bayes", "grid"):
                log = os.path.join(tmp, "%s_%s_%d.csv" % (workload, strategy, rep))
                res = run_once(args, hvdrun, workload, strategy, log)
                res["log"] = log
                results[workload][strategy].append(res)
                print("%s %s rep %d: best %.4g B/s (default %.4g) in %d samples, after %.4g B/s, %.0f s" %
                      (workload, strategy, rep, res["best"], res["default"], res["samples"], res["after"] or 0,
                       res["wall"]), flush=True)
    table = render(args, results)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    if args.png:
        plot(results, args.png)


def med(xs):
    return statistics.median(xs)


def render(args, results):
    lines = ["# Autotune against an exhaustive grid (2 ranks, %d repetitions, interleaved)" % args.reps, "",
             "Command: `python3 bench/autotune_bench.py --reps %d --grid-points %d`" % (args.reps, args.grid_points), "",
             "| workload | free knobs | grid points | bayes best in %d samples (MB/s) | grid best (MB/s) | bayes / grid |"
             " default (MB/s) | after settling: bayes (MB/s) | after settling: grid (MB/s) | run time bayes / grid (s) |"
             % args.max_samples,
             "|---|---|---|---|---|---|---|---|---|---|"]
    for workload, r in results.items():
        b, g = r["bayes"], r["grid"]
        ratios = [x["best"] / y["best"] for x, y in zip(b, g)]
        free = free_knobs(b[0]["log"])
        cells = [workload, ", ".join(free), str(g[0]["samples"] - 1),
                 "%.1f (%s)" % (med([x["best"] for x in b]) / 1e6, ", ".join("%.1f" % (x["best"] / 1e6) for x in b)),
                 "%.1f (%s)" % (med([x["best"] for x in g]) / 1e6, ", ".join("%.1f" % (x["best"] / 1e6) for x in g)),
                 "%.3f (%s)" % (med(ratios), ", ".join("%.3f" % x for x in ratios)),
                 "%.1f" % (med([x["default"] for x in b + g]) / 1e6),
                 "%.1f" % (med([x["after"] for x in b]) / 1e6), "%.1f" % (med([x["after"] for x in g]) / 1e6),
                 "%.0f / %.0f" % (med([x["wall"] for x in b]), med([x["wall"] for x in g]))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Cells: median (each repetition, in run order). Scores are the engine's own: collective payload",
              "bytes per second of wall time over whole steps (compute included). `after settling`: the",
              "gradient bytes of 20 more steps at the chosen setting per second, timed by the workers.", ""]
    for workload, r in results.items():
        lines.append("Chosen settings, %s:" % workload)
        for strategy in ("bayes", "grid"):
            for x in r[strategy]:
                f = x["final"]
                lines.append("- %s: sample %s, %s" % (strategy, f["sample"], ", ".join(
                    "%s=%s" % (k, f[k]) for k in f if k not in ("sample", "phase", "score_bytes_per_sec"))))
        lines.append("")
    load = os.getloadavg()[0]
    lines.append("Load average (1 min) at the end: %.1f." % load)
    return "\n".join(lines) + "\n"


def free_knobs(log):
    samples, _ = read_log(log)
    keys = [k for k in samples[0] if k not in ("sample", "phase", "score_bytes_per_sec")]
    return [k for k in keys if len({s[k] for s in samples}) > 1]


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (workload, r) in zip(axes[0], results.items()):
        # The median repetition of bayes (by best score).
        runs = sorted(r["bayes"], key=lambda x: x["best"])
        run = runs[len(runs) // 2]
        xs = list(range(len(run["scores"])))
        ax.plot(xs, [s / 1e6 for s in run["scores"]], "o-", label="bayes: score per sample")
        best, running = -math.inf, []
        for s in run["scores"]:
            best = max(best, s)
            running.append(best / 1e6)
        ax.plot(xs, running, "-", label="bayes: best so far")
        gbest = med([x["best"] for x in r["grid"]]) / 1e6
        ax.axhline(gbest, color="k", linestyle="--", label="grid best (%d points)" % (r["grid"][0]["samples"] - 1))
        ax.axhline(0.95 * gbest, color="gray", linestyle=":", label="95% of grid best")
        ax.set_title(workload)
        ax.set_xlabel("sample")
        ax.set_ylabel("score (MB/s reduced)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
