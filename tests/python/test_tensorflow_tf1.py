"""horovod.tensorflow with eager execution disabled (TF1 mode) for a whole process: launches
tf1_session_worker.py under ``horovodrun -np 2`` with a timeout (TF1 mode cannot be turned on
inside the TF2 test process)."""

import os
import shutil
import signal
import subprocess
import sys

import pytest

pytest.importorskip('tensorflow')

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))


def test_tf1_sessions_hooks_local_aggregation_and_state():
    horovodrun = shutil.which('horovodrun')
    if horovodrun is None:
        pytest.skip('horovodrun is not on PATH')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1')
    proc = subprocess.Popen([horovodrun, '-np', '2', sys.executable,
                             os.path.join(HERE, 'tf1_session_worker.py')],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail('timed out after {} s:\n{}'.format(TIMEOUT, out[-4000:]))
    assert proc.returncode == 0, out[-6000:]
    assert 'tf1 checks passed on 2 ranks' in out
