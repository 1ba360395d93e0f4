"""A rank stopped with SIGSTOP during a job under horovodrun: every survivor's error names it,
horovodrun's summary names it (not the first survivor to exit), and the job ends at once: the
stopped rank goes at the SIGTERM (sent with a SIGCONT), not at the SIGKILL after the grace
period. Asserts on events only; bench/paused_rank.py measures the times. Needs horovod
importable by this Python (run from the venv the package is installed in)."""

import subprocess
import sys

import pytest

from paused_rank_util import run_paused_job


@pytest.fixture(scope='module')
def core_importable():
    probe = subprocess.run([sys.executable, '-c', 'import horovod._core'], capture_output=True)
    if probe.returncode != 0:
        pytest.skip('horovod._core is not importable by {}'.format(sys.executable))


@pytest.mark.parametrize('np,victim', [(2, 1), (3, 1), (3, 2)])
def test_stopped_rank_is_named_and_the_job_ends(hvdrun, core_importable, np, victim):
    job = run_paused_job(hvdrun, np, victim)
    out = job.stdout + job.stderr
    assert job.returncode == 1, out
    survivors = [r for r in range(np) if r != victim]
    for rank in survivors:
        assert rank in job.failures, 'rank {} reported no error:\n{}'.format(rank, out)
        _, kind, blamed, message = job.failures[rank]
        assert kind == 'HorovodPeerLostError' and blamed == victim, out
        assert 'rank {}'.format(victim) in message, out
    assert victim not in job.failures, out  # it never ran again
    summary = ('Horovod detected that one or more processes stopped (SIGSTOP or SIGTSTP) and no longer answered '
               'their peers, thus causing the job to be terminated. The first process to do so was:\n'
               'Process name: {}\nExit code: 143 (it was stopped when process '.format(victim))
    assert summary in job.stderr, out
    assert 'is stopped (SIGSTOP or SIGTSTP)' in job.stdout, out
    # The stopped rank went at the SIGTERM: horovodrun resumed it (SIGCONT) instead of waiting for
    # the grace period's SIGKILL.
    assert 'horovodrun: process {} on localhost ended with signal 15 (SIGTERM)'.format(victim) in job.stderr, out
    assert 'signal 9 (SIGKILL)' not in job.stderr, out
