"""Starting a test's processes with a time bound: ``run_bounded`` for any command,
``run_under_horovodrun`` for ``python ARGS`` under ``horovodrun -np N``. Each run gets its own
process group, killed whole when the time runs out (the test then fails with the output's
tail)."""

import os
import shutil
import signal
import subprocess
import sys

import pytest


def run_bounded(cmd, env, timeout, cwd=None, tail=8000):
    """(exit code, combined stdout and stderr) of ``cmd``; fails the test after ``timeout``
    seconds, showing the last ``tail`` characters of the output."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=cwd, start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail('timed out after {} s: {}\n{}'.format(timeout, ' '.join(cmd), out[-tail:]),
                    pytrace=False)
    return proc.returncode, out


def run_under_horovodrun(args, timeout, env_extra=None, np_=2, cwd=None):
    """(exit code, output) of ``python ARGS`` on ``np_`` ranks under the horovodrun on PATH
    (the test is skipped without one), with TensorFlow's logging quiet and Python unbuffered."""
    horovodrun = shutil.which('horovodrun')
    if horovodrun is None:
        pytest.skip('horovodrun is not on PATH')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1', **(env_extra or {}))
    return run_bounded([horovodrun, '-np', str(np_), sys.executable] + list(args), env, timeout,
                       cwd=cwd)
