"""How fast a stopped rank is named: runs a job under horovodrun, SIGSTOPs one rank once every
rank runs its allreduce loop, and reports per run each survivor's detection time (the wall time
its error reached Python minus the SIGSTOP's), whom it blamed, and when horovodrun exited after
the last survivor's error.

    python3 bench/paused_rank.py --runs 10 --np 3 --victim 1

The job is tests/launcher/paused_rank_util.py's (shared with the launcher test). Needs horovodrun
on PATH (or --hvdrun) and horovod importable by this Python. Exit status 1 when a survivor blamed
another rank or the summary did not name the stopped rank."""

import argparse
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests', 'launcher'))
from paused_rank_util import run_paused_job  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--runs', type=int, default=10)
    parser.add_argument('--np', type=int, default=3)
    parser.add_argument('--victim', type=int, default=1)
    parser.add_argument('--hvdrun', default=shutil.which('horovodrun'))
    args = parser.parse_args()
    if not args.hvdrun:
        sys.exit('horovodrun not found: put it on PATH or pass --hvdrun')
    detections, endings, bad = [], [], 0
    for run in range(args.runs):
        job = run_paused_job(args.hvdrun, args.np, args.victim)
        times = {r: f[0] - job.stopped_at for r, f in sorted(job.failures.items())}
        blamed = {r: f[2] for r, f in sorted(job.failures.items())}
        named = 'Process name: {}\n'.format(args.victim) in job.stderr
        ok = named and all(b == args.victim for b in blamed.values()) and len(times) == args.np - 1
        bad += not ok
        detections += times.values()
        ending = job.ended_at - max(f[0] for f in job.failures.values()) if job.failures else float('nan')
        endings.append(ending)
        print('run {:2d}: detection {} s; blamed {}; summary names rank {}: {}; horovodrun exit {} {:.2f} s after '
              'the last error'.format(run, ', '.join('rank {} {:.2f}'.format(r, t) for r, t in times.items()),
                                      sorted(set(blamed.values())), args.victim, named, job.returncode, ending),
              flush=True)
    if detections:
        print('detection: min {:.2f} s, median {:.2f} s, max {:.2f} s over {} survivor errors; horovodrun exit: '
              'max {:.2f} s after the last error; {} run(s) misreported'.format(
                  min(detections), statistics.median(detections), max(detections), len(detections), max(endings),
                  bad))
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
