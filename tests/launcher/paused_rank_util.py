"""A job under horovodrun whose rank gets SIGSTOP: shared by the launcher test
(test_paused_rank.py) and the measurement (bench/paused_rank.py).

Every rank runs allreduces in a loop and prints one line when its loop fails: its rank, the
wall time, the exception type, the rank the error names and the message. The survivors ignore
SIGTERM (they exit once they reported); the stopped rank does not. run_paused_job() starts
the job, stops `victim` once every rank is in its loop, and returns what happened."""

import os
import re
import select
import signal
import subprocess
import sys
import time

WORKER = r'''
import os, signal, sys, time
import numpy as np
from horovod import _core
from horovod.common.exceptions import HorovodInternalError
from horovod.common.ops import Sum
_core.init(None, False)
rank = _core.rank()
if rank != int(os.environ['PAUSED_VICTIM']):
    # A survivor reports its own error even when horovodrun's SIGTERM comes first (a loaded
    # machine), then exits; the stopped rank keeps the default (it must go at the SIGTERM).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
_core.barrier_async(0).wait()
print('ready rank {} pid {}'.format(rank, os.getpid()), flush=True)
try:
    while True:
        _core.allreduce_async(np.ones(4, np.float32), None, 'step', Sum, 1.0, 1.0, 0).wait()
        time.sleep(0.005)
except HorovodInternalError as e:
    print('failed rank {} at {:.6f} {} blames {}: {}'.format(
        rank, time.time(), type(e).__name__, getattr(e, 'rank', None), e), flush=True)
    sys.exit(5)
'''

READY = re.compile(r'ready rank (\d+) pid (\d+)')
FAILED = re.compile(r'failed rank (\d+) at ([\d.]+) (\w+) blames (\S+): (.*)')


class PausedJob:
    def __init__(self):
        self.returncode = None
        self.stdout = ''
        self.stderr = ''
        self.stopped_at = None   # wall time of the SIGSTOP
        self.ended_at = None     # wall time horovodrun exited
        self.failures = {}       # rank -> (wall time, exception type, blamed rank, message)


def run_paused_job(hvdrun, np, victim, timeout=90, python=sys.executable, extra_env=None, settle=0.3):
    """Runs `np` ranks, SIGSTOPs rank `victim` once all run their loop, and waits (bounded by
    `timeout`: the whole process group is killed then) for horovodrun to exit."""
    env = dict(os.environ, PAUSED_VICTIM=str(victim))
    env.update(extra_env or {})
    proc = subprocess.Popen([hvdrun, '--verbose', '-np', str(np), python, '-c', WORKER], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    job = PausedJob()
    pids = {}
    buffers = {proc.stdout.fileno(): b'', proc.stderr.fileno(): b''}
    out, err = [], []
    deadline = time.monotonic() + timeout
    open_fds = set(buffers)
    victim_pid = None
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError('the paused-rank job did not end within {} s'.format(timeout))
            ready, _, _ = select.select(list(open_fds), [], [], min(left, 0.1))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.discard(fd)
                    continue
                (out if fd == proc.stdout.fileno() else err).append(chunk)
                if fd != proc.stdout.fileno():
                    continue
                buffers[fd] += chunk
                *lines, buffers[fd] = buffers[fd].split(b'\n')
                for line in lines:
                    text = line.decode('utf-8', 'replace')
                    m = READY.search(text)
                    if m:
                        pids[int(m.group(1))] = int(m.group(2))
                    m = FAILED.search(text)
                    if m:
                        blamed = None if m.group(4) == 'None' else int(m.group(4))
                        job.failures[int(m.group(1))] = (float(m.group(2)), m.group(3), blamed, m.group(5))
            if victim_pid is None and len(pids) == np:
                time.sleep(settle)  # a few steps into the loop
                victim_pid = pids[victim]
                job.stopped_at = time.time()
                os.kill(victim_pid, signal.SIGSTOP)
        job.returncode = proc.wait(timeout=max(1, deadline - time.monotonic()))
        job.ended_at = time.time()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if victim_pid is not None:
            try:
                os.kill(victim_pid, signal.SIGKILL)  # never leave a stopped process behind
            except ProcessLookupError:
                pass
    job.stdout = b''.join(out).decode('utf-8', 'replace')
    job.stderr = b''.join(err).decode('utf-8', 'replace')
    return job
