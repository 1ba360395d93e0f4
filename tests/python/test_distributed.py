"""Runs the distributed test files under ``horovodrun -np 2`` and ``-np 3``.

Each run is bounded by HOROVOD_TEST_TIMEOUT seconds (default 420); on timeout the whole process
group (launcher and workers) is killed and the test fails with the output's tail. Without
``horovodrun`` on PATH (a development tree), ranks are started directly with HOROVOD_RANK/SIZE
and a file-based rendezvous directory.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from conftest import DISTRIBUTED_FILES

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))
SIZES = [int(n) for n in os.environ.get('HOROVOD_TEST_SIZES', '2,3').split(',')]


def _pytest_cmd(test_file):
    return [sys.executable, '-m', 'pytest', '-x', '-q', '-p', 'no:cacheprovider',
            os.path.join(HERE, test_file)]


def _run_group(procs, timeout):
    """Waits for every process; kills every process group on timeout. Returns (ok, message)."""
    try:
        codes = [p.wait(timeout=timeout) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
        return False, 'timed out after %d s' % timeout
    return all(c == 0 for c in codes), 'exit codes %s' % codes


def _tail(path, limit=12000):
    with open(path, errors='replace') as f:
        text = f.read()
    return text[-limit:]


def _launch(np_, test_file, log):
    env = dict(os.environ)
    env.setdefault('HOROVOD_GLOO_TIMEOUT_SECONDS', '60')
    env['PYTHONUNBUFFERED'] = '1'
    cmd = _pytest_cmd(test_file)
    horovodrun = shutil.which('horovodrun')
    if horovodrun:
        return [subprocess.Popen([horovodrun, '-np', str(np_)] + cmd, stdout=log,
                                 stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                 cwd=HERE)]
    rendezvous = tempfile.mkdtemp(prefix='hvd-rdv-')
    procs = []
    for r in range(np_):
        worker_env = dict(env, HOROVOD_RANK=str(r), HOROVOD_SIZE=str(np_),
                          HOROVOD_LOCAL_RANK=str(r), HOROVOD_LOCAL_SIZE=str(np_),
                          HOROVOD_CROSS_RANK='0', HOROVOD_CROSS_SIZE='1',
                          HOROVOD_RENDEZVOUS_DIR=rendezvous)
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=worker_env,
                                      start_new_session=True, cwd=HERE))
    return procs


@pytest.mark.parametrize('np_', SIZES, ids=lambda n: 'np%d' % n)
@pytest.mark.parametrize('test_file', DISTRIBUTED_FILES)
def test_under_launcher(test_file, np_, tmp_path):
    log_path = tmp_path / 'output.log'
    with open(log_path, 'w') as log:
        procs = _launch(np_, test_file, log)
        ok, why = _run_group(procs, TIMEOUT)
    if not ok:
        pytest.fail('%s with %d ranks failed (%s):\n%s' % (test_file, np_, why, _tail(log_path)),
                    pytrace=False)
