"""Private Slurm clusters (scripts/slurm_local.sh) for the tests in this folder, each started
once per session with its own config, state and ports, and stopped at the end: `slurm`, one
node (this host), and `slurm2`, two nodes in their own network and UTS namespaces (host names
node1 and node2). Their .run(args, timeout) runs a Slurm client command (srun, sbatch, salloc,
...) against the cluster, bounded by a timeout. The cluster needs root and
Debian's slurmctld, slurmd and slurm-client (scripts/setup.sh installs them); without them the
tests skip with the reason."""

import os
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(ROOT, 'scripts', 'slurm_local.sh')


class SlurmCluster:
    def __init__(self, directory):
        self.directory = directory
        self.conf = os.path.join(directory, 'slurm.conf')

    def env(self, extra=None):
        """The environment for a client command: ours plus this cluster's slurm.conf. srun
        passes it on to the tasks, so they import the horovod this test process would import
        (the installed one, or the checkout's with PYTHONPATH=<checkout>/python)."""
        environment = dict(os.environ)
        environment['SLURM_CONF'] = self.conf
        environment.update(extra or {})
        return environment

    def run(self, args, timeout=120, extra_env=None, cwd=ROOT):
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                              env=self.env(extra_env), cwd=cwd)


def _cluster(cpus, nodes):
    directory = tempfile.mkdtemp(prefix='hvd-slurm-')
    started = subprocess.run([HARNESS, 'start', directory, str(cpus), str(nodes)], capture_output=True, text=True,
                             timeout=90)
    if started.returncode == 77:
        pytest.skip('no private Slurm cluster on this machine: ' + started.stderr.strip())
    assert started.returncode == 0, 'slurm_local.sh start failed:\n' + started.stdout + started.stderr
    try:
        yield SlurmCluster(directory)
    finally:
        subprocess.run([HARNESS, 'stop', directory], timeout=60)


@pytest.fixture(scope='session')
def slurm():
    yield from _cluster(cpus=4, nodes=1)


@pytest.fixture(scope='session')
def slurm2():
    yield from _cluster(cpus=2, nodes=2)
