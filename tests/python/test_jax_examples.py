"""The JAX example runs at 2 ranks under ``horovodrun`` and under plain ``mpirun.openmpi``
(each bounded by a timeout) and prints what its docstring promises: per-epoch progress, the
stated accuracy and identical weights on every rank."""

import os
import re
import shutil
import sys

import pytest
from launch_util import run_bounded, run_under_horovodrun

pytest.importorskip('jax')
pytest.importorskip('sklearn')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, 'examples', 'jax', 'jax_digits.py')
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))


def check_output(out):
    epochs = re.findall(r'epoch +(\d+): loss ([\d.]+) +test accuracy ([\d.]+)', out)
    assert len(epochs) == 15, out[-4000:]
    assert float(epochs[-1][1]) < float(epochs[0][1])
    assert 'weights identical on all 2 ranks: True' in out
    assert float(re.search(r'final test accuracy: ([\d.]+)', out).group(1)) >= 0.95


def test_digits_under_horovodrun():
    rc, out = run_under_horovodrun([EXAMPLE], TIMEOUT, env_extra={'JAX_PLATFORMS': 'cpu'})
    assert rc == 0, out[-6000:]
    check_output(out)


def test_digits_under_mpirun():
    try:
        from horovod import _core
    except ImportError:
        pytest.skip('horovod._core is not built')
    if not _core.mpi_built():
        pytest.skip('horovod._core has no MPI plugin (build with libopenmpi-dev installed)')
    exe = shutil.which('mpirun.openmpi')
    if exe is None:
        pytest.skip('mpirun.openmpi not found (apt-get install openmpi-bin)')
    cmd = [exe, '-np', '2', '--oversubscribe'] + (['--allow-run-as-root'] if os.geteuid() == 0 else [])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('HOROVOD_', 'OMPI_', 'PMI_', 'PMIX_', 'SLURM_'))}
    env.update(PYTHONUNBUFFERED='1', JAX_PLATFORMS='cpu')
    rc, out = run_bounded(cmd + [sys.executable, EXAMPLE], env, TIMEOUT)
    assert rc == 0, out[-6000:]
    check_output(out)
