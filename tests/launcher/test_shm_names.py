"""Named shared-memory segments (HOROVOD_SHM_NAMED=1) never outlive a job, however it is
killed: 50 two-rank jobs under horovodrun, each SIGKILLed at a random moment of its life (set-up,
the allreduce, teardown) by a random target (horovodrun, one rank, both ranks), must leave no new
/dev/shm entry of Horovod's ("/dev/shm/hvd-*") once their processes are gone. Each job is a few
seconds at most, bounded; the test reports how many kills hit a job while its names existed."""

import os
import random
import signal
import subprocess
import time

import pytest

from launcher_util import wait_until

RUNS = 50
SHM = '/dev/shm'


def our_names():
    try:
        return {n for n in os.listdir(SHM) if n.startswith('hvd-')}
    except FileNotFoundError:
        return set()


def children(pid):
    try:
        with open('/proc/{0}/task/{0}/children'.format(pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def ranks_of(hvdrun_pid, program):
    """The rank processes horovodrun started (its other child is the orphan guard)."""
    found = []
    for pid in children(hvdrun_pid):
        try:
            with open('/proc/{}/cmdline'.format(pid), 'rb') as f:
                if f.read().split(b'\0')[0].decode() == program:
                    found.append(pid)
        except OSError:
            pass
    return found


def alive(pid):
    try:
        with open('/proc/{}/stat'.format(pid)) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir(SHM), reason='no /dev/shm')
def test_killed_jobs_leave_no_named_segments(hvdrun, check_program):
    env = dict(os.environ, HOROVOD_SHM_NAMED='1')
    before = our_names()
    # How long one job lives here (loaded machines vary): kills are spread over it.
    start = time.monotonic()
    r = subprocess.run([hvdrun, '-np', '2', check_program], env=env, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    span = max(0.2, time.monotonic() - start) * 1.1
    rng = random.Random(int(os.environ.get('HOROVOD_TEST_SEED', '0')) or None)
    hit_live_names = 0
    for run in range(RUNS):
        proc = subprocess.Popen([hvdrun, '-np', '2', check_program], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        target = rng.choice(['horovodrun', 'rank', 'ranks'])
        time.sleep(rng.uniform(0, span))
        ranks = ranks_of(proc.pid, check_program)
        hit_live_names += bool(our_names() - before)
        try:
            if target == 'horovodrun':
                os.kill(proc.pid, signal.SIGKILL)
            else:
                for pid in ranks if target == 'ranks' else rng.sample(ranks, min(1, len(ranks))):
                    os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended just before: a kill at the very end
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # horovodrun gone, its ranks end by the launcher's termination or the orphan guard's.
        gone = wait_until(lambda: not any(alive(p) for p in ranks), 15)
        assert gone, 'run {}: ranks {} outlived the job ({} killed)'.format(run, ranks, target)
        # Each rank's name reaper unlinks what its rank left once the rank is gone.
        leaked = []
        if not wait_until(lambda: not (our_names() - before), 10):
            leaked = sorted(our_names() - before)
        assert not leaked, 'run {} ({} killed): left in {}: {}'.format(run, target, SHM, leaked)
    print('{} of {} kills hit a job while its named segments existed'.format(hit_live_names, RUNS))
