"""How soon an op shows in a running timeline: `horovodrun -np 2 python3 bench/timeline_latency.py`.

Each step, every rank runs one allreduce; rank 0 then reads the timeline file (as a reader tailing
it would) until it holds that step's ALLREDUCE event, and records the time from the allreduce's
return to that moment. A barrier separates the steps. Prints the median, 90th percentile and
maximum over --steps steps (docs/timeline.md quotes them).
"""

import argparse
import os
import statistics
import tempfile
import time

import torch

import horovod.torch as hvd


def allreduce_events(path):
    """ALLREDUCE events in the complete lines of a timeline being written."""
    with open(path) as f:
        text = f.read()
    return text[:text.rfind('\n') + 1].count('{"name":"ALLREDUCE",')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault('HOROVOD_TIMELINE', 'DYNAMIC')
    hvd.init()
    path = os.path.join(tempfile.mkdtemp(prefix='hvd-timeline-latency-'), 'timeline.json')
    hvd.start_timeline(path)
    hvd.barrier()
    x = torch.ones(1024)
    latencies = []
    for step in range(args.steps):
        hvd.allreduce(x, name='latency')
        done = time.perf_counter()
        if hvd.rank() == 0:
            deadline = done + 10
            while allreduce_events(path) < step + 1 and time.perf_counter() < deadline:
                time.sleep(0.0002)
            latencies.append(time.perf_counter() - done)
        hvd.barrier()
    hvd.stop_timeline()
    if hvd.rank() == 0:
        ms = sorted(1000 * s for s in latencies)
        print('timeline latency over %d ops: median %.1f ms, p90 %.1f ms, max %.1f ms' %
              (len(ms), statistics.median(ms), ms[int(0.9 * (len(ms) - 1))], ms[-1]))
    hvd.shutdown()


if __name__ == '__main__':
    main()
