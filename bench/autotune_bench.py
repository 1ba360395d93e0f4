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
score (each run's sample 0), and the throughput re-measured after settling on each strategy's
choice, with its ratio.
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

if os.environ.get("HVD_BENCH_MEASURE"):
    # A fixed setting (pinned through the environment): warm up, then time `after` steps.
    for _ in range(int(os.environ["HVD_BENCH_MEASURE"])):
        step()
    hvd.allreduce(torch.zeros(1), name="bench.sync")
    start = time.perf_counter()
    for _ in range(after):
        step()
    hvd.allreduce(torch.zeros(1), name="bench.sync")
    elapsed = hvd.allreduce(torch.tensor([time.perf_counter() - start]), name="bench.elapsed", op=hvd.Max).item()
    if hvd.rank() == 0:
        print("RESULT steps=0 after_bytes_per_sec=%.6g" % (step_bytes * after / elapsed), flush=True)
    sys.exit(0)

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
        "HVD_BENCH_ROOT": ROOT, "HVD_BENCH_WORKLOAD": workload, "HVD_BENCH_AFTER": str(args.after[workload]),
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


def setting_env(row):
    """The environment that pins every knob to a CSV row's values."""
    return {"HOROVOD_FUSION_THRESHOLD": row["fusion_threshold_bytes"], "HOROVOD_BURST_QUIET_US": row["burst_quiet_us"],
            "HOROVOD_CALLER_PROGRESS_US": row["caller_progress_us"], "HOROVOD_CALLER_SPIN_US": row["caller_spin_us"],
            "HOROVOD_ALLREDUCE_CROSSOVER_BYTES": row["allreduce_crossover_bytes"],
            "HOROVOD_CACHE_CAPACITY": "1024" if row["cache_enabled"] == "1" else "0"}


def measure(args, hvdrun, workload, row):
    env = dict(os.environ)
    env.update({"HVD_BENCH_ROOT": ROOT, "HVD_BENCH_WORKLOAD": workload, "HVD_BENCH_AFTER": str(args.after[workload]),
                "HVD_BENCH_MAX_STEPS": "0", "HVD_BENCH_MEASURE": str(args.measure_warmup[workload]),
                "HOROVOD_AUTOTUNE_LOG": "/dev/null"})
    env.update(setting_env(row))
    r = subprocess.run([hvdrun, "-np", "2", sys.executable, "-c", WORKER], env=env, capture_output=True, text=True,
                       timeout=args.timeout)
    if r.returncode != 0:
        raise RuntimeError("measure failed:\n%s\n%s" % (r.stdout[-3000:], r.stderr[-3000:]))
    for line in r.stdout.splitlines():
        if "RESULT" in line:
            return float(line.split("after_bytes_per_sec=")[1])
    raise RuntimeError("no result:\n" + r.stdout)


def verify(args, hvdrun, results):
    """Re-measures, per repetition, the default setting and each strategy's choice in alternation
    (default, bayes, grid, default, ...), so that a change of the machine's load hits all three."""
    for workload, r in results.items():
        for b, g in zip(r["bayes"], r["grid"]):
            samples, _ = read_log(b["log"])
            rows = {"default": samples[0], "bayes": b["final"], "grid": g["final"]}
            got = {k: [] for k in rows}
            for _ in range(args.verify_rounds):
                for k, row in rows.items():
                    got[k].append(measure(args, hvdrun, workload, row))
            b["verify"] = got
            print("%s verify: default %.4g, bayes %.4g, grid %.4g B/s" %
                  (workload, med(got["default"]), med(got["bayes"]), med(got["grid"])), flush=True)


def load_results(args):
    """Results of an earlier tuning pass: its logs in --verify-dir, its 'after' lines in --tune-log."""
    results = {}
    after = {}
    with open(args.tune_log) as f:
        for line in f:
            parts = line.split()
            if len(parts) > 3 and parts[2] == "rep" and "after" in line:
                after[(parts[0], parts[1], int(parts[3].rstrip(":")))] = (
                    float(line.split("after ")[1].split()[0]), float(line.rsplit(",", 1)[1].split()[0]))
    for workload in args.workloads.split(","):
        results[workload] = {"bayes": [], "grid": []}
        for rep in range(args.reps):
            for strategy in ("bayes", "grid"):
                log = os.path.join(args.verify_dir, "%s_%s_%d.csv" % (workload, strategy, rep))
                samples, final = read_log(log)
                scores = [float(x["score_bytes_per_sec"]) for x in samples]
                a, wall = after.get((workload, strategy, rep), (float("nan"), float("nan")))
                results[workload][strategy].append({"scores": scores, "best": max(scores), "default": scores[0],
                                                    "after": a, "final": final, "wall": wall,
                                                    "samples": len(scores), "log": log})
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="synth160,mlp")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-samples", type=int, default=20)
    p.add_argument("--warmup-samples", type=int, default=2)
    p.add_argument("--grid-points", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=20000)
    p.add_argument("--build-dir", default=os.environ.get("HVD_BUILD_DIR", "build"))
    p.add_argument("--timeout", type=float, default=3000)
    p.add_argument("--verify-rounds", type=int, default=3)
    p.add_argument("--verify-dir", default=None,
                   help="skip tuning: verify the logs of an earlier pass in this directory")
    p.add_argument("--tune-log", default=None, help="with --verify-dir: that pass's printed output")
    p.add_argument("--out", default=None)
    p.add_argument("--png", default=None)
    args = p.parse_args()
    # Samples of ~0.2 s (synth160) and ~1.2 s (mlp): shorter ones are mostly scheduling noise on a
    # shared 2-core machine.
    args.steps_per_sample = {"synth160": 20, "mlp": 3}
    args.after = {"synth160": 100, "mlp": 15}
    args.measure_warmup = {"synth160": 20, "mlp": 3}
    hvdrun = find_horovodrun(args.build_dir)
    if hvdrun is None:
        sys.exit("horovodrun not found")
    if args.verify_dir:
        results = load_results(args)
        verify(args, hvdrun, results)
        finish(args, results)
        return
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
    if args.verify_rounds > 0:
        verify(args, hvdrun, results)
    finish(args, results)


def finish(args, results):
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
             "Command: `python3 bench/autotune_bench.py --reps %d --grid-points %d`"
             % (args.reps, args.grid_points), "",
             "| workload | free knobs | grid points | bayes best in %d samples (MB/s) | grid best (MB/s) "
             "| bayes / grid | default (MB/s) | after settling: bayes (MB/s) | after settling: grid (MB/s) "
             "| after: bayes / grid | run time bayes / grid (s) |" % args.max_samples,
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for workload, r in results.items():
        b, g = r["bayes"], r["grid"]
        ratios = [x["best"] / y["best"] for x, y in zip(b, g)]
        after = [x["after"] / y["after"] for x, y in zip(b, g)]
        free = free_knobs(g[0]["log"])
        cells = [workload, ", ".join(free), str(g[0]["samples"] - 1),
                 "%.1f (%s)" % (med([x["best"] for x in b]) / 1e6, ", ".join("%.1f" % (x["best"] / 1e6) for x in b)),
                 "%.1f (%s)" % (med([x["best"] for x in g]) / 1e6, ", ".join("%.1f" % (x["best"] / 1e6) for x in g)),
                 "%.3f (%s)" % (med(ratios), ", ".join("%.3f" % x for x in ratios)),
                 "%.1f" % (med([x["default"] for x in b + g]) / 1e6),
                 "%.1f" % (med([x["after"] for x in b]) / 1e6), "%.1f" % (med([x["after"] for x in g]) / 1e6),
                 "%.3f (%s)" % (med(after), ", ".join("%.3f" % x for x in after)),
                 "%.0f / %.0f" % (med([x["wall"] for x in b]), med([x["wall"] for x in g]))]
        lines.append("| " + " | ".join(cells) + " |")
    if all("verify" in x for r in results.values() for x in r["bayes"]):
        lines += ["", "Re-measured in alternation (default, bayes's choice, grid's choice; %d rounds per repetition,"
                  % args.verify_rounds,
                  "each a fresh job pinned to the setting; bytes per second of the timed steps):", "",
                  "| workload | default (MB/s) | bayes's choice (MB/s) | grid's choice (MB/s) | bayes / grid "
                  "| bayes / default |",
                  "|---|---|---|---|---|---|"]
        for workload, r in results.items():
            vs = [x["verify"] for x in r["bayes"]]
            d = [med(v["default"]) for v in vs]
            b = [med(v["bayes"]) for v in vs]
            g = [med(v["grid"]) for v in vs]
            bg = [x / y for x, y in zip(b, g)]
            bd = [x / y for x, y in zip(b, d)]
            lines.append("| %s | %.1f (%s) | %.1f (%s) | %.1f (%s) | %.3f (%s) | %.3f (%s) |" % (
                workload, med(d) / 1e6, ", ".join("%.1f" % (x / 1e6) for x in d), med(b) / 1e6,
                ", ".join("%.1f" % (x / 1e6) for x in b), med(g) / 1e6, ", ".join("%.1f" % (x / 1e6) for x in g),
                med(bg), ", ".join("%.3f" % x for x in bg), med(bd), ", ".join("%.3f" % x for x in bd)))
    lines += ["", "Cells: median (each repetition, in run order). Scores are the engine's own: collective payload",
              "bytes per second of wall time over whole steps (compute included), %s steps per sample. `after" %
              ", ".join("%s %d" % kv for kv in args.steps_per_sample.items()),
              "settling`: the gradient bytes per second of %s more steps at the chosen setting, timed by" %
              " / ".join("%d (%s)" % (v, k) for k, v in args.after.items()),
              "the workers: the throughput each strategy's choice really gives. The best of many noisy",
              "samples is biased upwards, more so for the grid's hundreds than for 20, so `bayes / grid` on",
              "best scores understates autotune on a noisy machine; `after: bayes / grid` compares the choices.", ""]
    for workload, r in results.items():
        lines.append("Chosen settings, %s:" % workload)
        for strategy in ("bayes", "grid"):
            for x in r[strategy]:
                f = x["final"]
                lines.append("- %s: sample %s, %s" % (strategy, f["sample"], ", ".join(
                    "%s=%s" % (k, f[k]) for k in f if k not in ("sample", "phase", "score_bytes_per_sec"))))
        lines.append("")
    lines.append("Drift of the machine during the grid runs (median score of each run of consecutive samples,")
    lines.append("every setting mixed; a flat landscape under a steady load would give equal medians):")
    for workload, r in results.items():
        for x in r["grid"]:
            n = max(5, len(x["scores"]) // 10)
            meds = [med(x["scores"][i:i + n]) / 1e6 for i in range(0, len(x["scores"]), n)]
            lines.append("- %s, %d samples per median: %s MB/s" % (workload, n, ", ".join("%.0f" % m for m in meds)))
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
