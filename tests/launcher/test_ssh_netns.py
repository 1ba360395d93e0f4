"""Multi-host launch over real ssh between network namespaces (tests/multiproc/launcher_ssh_netns.sh).
Skipped when the machine cannot create namespaces or run sshd (the script exits 77)."""

import os
import subprocess

import pytest

from launcher_util import ROOT

SCRIPT = os.path.join(ROOT, 'tests', 'multiproc', 'launcher_ssh_netns.sh')
MPI_SCRIPT = os.path.join(ROOT, 'tests', 'multiproc', 'mpi_ssh_netns.sh')


@pytest.mark.parametrize('script,limit', [(SCRIPT, 240), (MPI_SCRIPT, 400)], ids=['horovodrun', 'mpirun'])
def test_ssh_across_network_namespaces(hvdrun, script, limit):
    # mpirun: Open MPI's mpirun -H and MPICH's mpiexec -hosts across the namespaces, default and
    # MPI data planes (tests/multiproc/mpi_ssh_netns.sh).
    try:
        r = subprocess.run(['timeout', '-k', '10', str(limit), script, hvdrun], capture_output=True, text=True,
                           timeout=limit + 30)
    except subprocess.TimeoutExpired as e:
        pytest.fail('netns ssh test timed out: {}'.format(e.stdout))
    if r.returncode == 77:
        pytest.skip(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else 'skipped')
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'PASS' in r.stdout
