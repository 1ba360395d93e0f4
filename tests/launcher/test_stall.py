"""Ranks that diverge under horovodrun: the stall inspector's report and shutdown, and
different operations under one name failing quickly on every rank instead of hanging. Needs
horovod.torch importable by this Python (run from the venv the package is installed in)."""

import subprocess
import sys

import pytest

PYTHON = sys.executable


@pytest.fixture(scope='module')
def torch_adapter():
    probe = subprocess.run([PYTHON, '-c', 'import horovod.torch'], capture_output=True)
    if probe.returncode != 0:
        pytest.skip('horovod.torch is not importable by {}'.format(PYTHON))


STALL_SCRIPT = '''
import sys, time
import torch
import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError
hvd.init()
if hvd.rank() == 1:
    time.sleep(10)
try:
    hvd.allreduce(torch.ones(4), name='late')
    print('rank {} no error'.format(hvd.rank()), flush=True)
except HorovodInternalError as e:
    print('rank {} error after {:.0f} s: {}'.format(hvd.rank(), time.monotonic() - START, e), flush=True)
    if hvd.rank() == 0:
        time.sleep(6)  # let rank 1 wake up and report its own error before the job ends
    sys.exit(1)
'''


def test_stall_is_reported_then_shuts_the_job_down(run, torch_adapter):
    # Bounded by run()'s timeout; no elapsed-time check (torch's import alone takes long on a busy
    # machine): without the shutdown, rank 0 would wait for rank 1 and report no error.
    r = run('-np', 2, PYTHON, '-c', 'import time; START = time.monotonic()\n' + STALL_SCRIPT, timeout=60,
            extra_env={'HOROVOD_STALL_CHECK_TIME_SECONDS': '2', 'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS': '5'})
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    # The coordinator's warning names the late rank and the tensor, and who did submit it.
    assert ('[0]<stderr>:[' in r.stderr and 'One or more tensors were submitted to be reduced, gathered or '
            'broadcasted by subset of ranks and are waiting for remainder of ranks for more than 2 seconds.'
            in r.stderr), out
    assert '1: [allreduce.late]' in r.stderr, out
    assert 'allreduce.late (ALLREDUCE): submitted by rank 0, missing rank 1' in r.stderr, out
    # Every rank ends with the shutdown error carrying that report.
    assert '[0]<stdout>:rank 0 error after' in r.stdout, out
    assert '[1]<stdout>:rank 1 error after' in r.stdout, out
    assert r.stdout.count('HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=5 seconds') == 2, out


DIVERGE_SCRIPT = '''
import torch
import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError
hvd.init()
x = torch.ones(4)
try:
    if hvd.rank() == 0:
        hvd.allreduce(x, name='g')
    else:
        hvd.allgather(x, name='g')
    print('rank {} no error'.format(hvd.rank()), flush=True)
except HorovodInternalError as e:
    print('rank {} mismatch: {}'.format(hvd.rank(), e), flush=True)
# The job goes on.
print('rank {} sum {}'.format(hvd.rank(), int(hvd.allreduce(x, name='after', op=hvd.Sum)[0])), flush=True)
'''


def test_allreduce_vs_allgather_under_one_name_errors_quickly_everywhere(run, torch_adapter):
    # A hang instead of the error would run into run()'s timeout; how long the job took is not
    # checked (the ranks' imports dominate it, and a busy machine stretches them).
    r = run('-np', 3, PYTHON, '-c', DIVERGE_SCRIPT, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    expected = ("Mismatched operations for 'g': ranks submitted different operations under this name, so each "
                "waits for the others forever (ALLGATHER 'allgather.g': ranks 1, 2; ALLREDUCE 'allreduce.g': rank 0).")
    for rank in range(3):
        assert '[{0}]<stdout>:rank {0} mismatch: {1}'.format(rank, expected) in r.stdout, out
        assert '[{0}]<stdout>:rank {0} sum 3'.format(rank) in r.stdout, out
