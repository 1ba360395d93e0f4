"""--jsrun inside an IBM LSF job, with LSF's environment reproduced (LSB_JOBID, LSB_MCPU_HOSTS /
LSB_HOSTS) and a stand-in jsrun on PATH (fake_jsrun.py) that starts the ranks of the rankfile on
this machine as jsrun's tasks."""

import json
import os
import shutil
import socket

import pytest

from launcher_util import ROOT

HERE = os.path.join(ROOT, 'tests', 'launcher')


@pytest.fixture
def lsf(tmp_path):
    """extra_env(**lsf_vars) for a job in an LSF allocation, with jsrun on PATH; log() -> what
    the fake jsrun recorded."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    shutil.copy(os.path.join(HERE, 'fake_jsrun.py'), bin_dir / 'jsrun')
    log = tmp_path / 'jsrun.json'

    def extra_env(**lsf_vars):
        env = {'PATH': '{}:{}'.format(bin_dir, os.environ['PATH']), 'FAKE_JSRUN_LOG': str(log), 'LSB_JOBID': '4242'}
        env.update(lsf_vars)
        return env

    def read_log():
        with open(log) as f:
            return json.load(f)

    extra_env.log = read_log
    return extra_env


def test_jsrun_outside_lsf_is_refused(run):
    env = {k: v for k, v in os.environ.items() if not k.startswith('LSB_')}
    r = run('-np', '1', '--jsrun', 'true', env=env)
    assert r.returncode == 2
    assert 'Horovod did not detect an LSF job.  The jsrun launcher can only be used in that environment.' in r.stderr


def test_jsrun_without_jsrun_on_path_says_so(run, tmp_path):
    r = run('--jsrun', 'true', extra_env={'LSB_JOBID': '7', 'LSB_MCPU_HOSTS': 'batch 1 node1 4',
                                          'PATH': str(tmp_path)})
    assert r.returncode == 2
    assert 'LSF job 7 found, but jsrun is not on PATH' in r.stderr, r.stderr


def test_allocation_gives_hosts_np_and_the_rankfile(run, lsf):
    # The launch node (first in LSB_MCPU_HOSTS) runs no ranks; -np defaults to the other hosts' slots.
    r = run('--jsrun', '--tcp', '--mpi-args=-gpu', '--output-filename', '/tmp/out', 'true',
            extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 node1 4 node2 4'))
    assert r.returncode == 0, r.stderr
    seen = lsf.log()
    rankfile = seen['rankfile'].splitlines()
    assert rankfile[:2] == ['overlapping_rs: allow', 'cpu_index_using: logical']
    assert rankfile[2:] == ['rank: {}: {{ hostname: node{}; cpu: {{{}-{}}} ; gpu: * ; mem: * }}'.format(
        r, 1 + r // 4, r % 4, r % 4) for r in range(8)]
    argv = seen['argv']
    assert argv[1] == '--erf_input'
    assert argv[3:] == ['--stdio_stderr', '/tmp/out', '--stdio_stdout', '/tmp/out', '--smpiargs', '-tcp -gpu',
                        'true']
    assert not os.path.exists(argv[2]), 'the rankfile outlives the job'
    assert seen['env']['HOROVOD_GLOO_RENDEZVOUS_PORT'].isdigit() and seen['env']['HOROVOD_SECRET_KEY']


def test_np_and_hosts_override_the_allocation(run, lsf):
    r = run('--jsrun', '-np', '3', 'true', extra_env=lsf(LSB_HOSTS='batch1 n1 n1 n1 n1 n2 n2 n2 n2'))
    assert r.returncode == 0, r.stderr
    assert lsf.log()['rankfile'].splitlines()[2:] == [
        'rank: 0: { hostname: n1; cpu: {0-0} ; gpu: * ; mem: * }',
        'rank: 1: { hostname: n1; cpu: {1-1} ; gpu: * ; mem: * }',
        'rank: 2: { hostname: n1; cpu: {2-2} ; gpu: * ; mem: * }']
    r = run('--jsrun', '-np', '2', '-H', 'a:1,b:1', 'true', extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 n1 4'))
    assert r.returncode == 0, r.stderr
    assert [line.split(';')[0] for line in lsf.log()['rankfile'].splitlines()[2:]] == [
        'rank: 0: { hostname: a', 'rank: 1: { hostname: b']


def test_bad_allocations_are_named(run, lsf):
    r = run('--jsrun', 'true', extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 node1'))
    assert r.returncode == 2 and "LSB_MCPU_HOSTS='batch1 1 node1' is not 'host slots" in r.stderr, r.stderr
    r = run('--jsrun', 'true', extra_env=lsf())
    assert r.returncode == 2 and 'neither LSB_MCPU_HOSTS nor LSB_HOSTS names its hosts' in r.stderr, r.stderr
    r = run('--jsrun', '-np', '9', 'true', extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 node1 4 node2 4'))
    assert r.returncode == 2
    assert 'Requested more processes (9) than there are available slots (8)' in r.stderr, r.stderr


def test_jsrun_exit_status_is_the_launchers(run, lsf):
    r = run('--jsrun', '-np', '2', 'sh', '-c', 'exit $((3 + OMPI_COMM_WORLD_RANK))',
            extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 node1 2'))
    assert r.returncode == 3, r.stderr


def test_ranks_started_by_jsrun_form_a_job(run, lsf, check_program):
    # The real core: ranks from jsrun's variables, the rendezvous served by horovodrun.
    host = socket.gethostname()
    r = run('--jsrun', check_program, timeout=120, extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 {} 3'.format(host)))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if 'allreduce ok' in line)
    assert len(lines) == 3, r.stdout
    for rank, line in enumerate(lines):
        assert line.startswith('allreduce ok rank={} size=3 local_rank={} sum=6 '.format(rank, rank)), line


def test_jsrun_is_the_default_inside_lsf(run, lsf, tmp_path):
    # As Horovod: no launcher flag, an LSF job and jsrun on PATH: jsrun (hosts and -np from the
    # allocation). --gloo keeps horovodrun's own launcher; without jsrun on PATH, the default.
    r = run('true', extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 node1 2'))
    assert r.returncode == 0, r.stderr
    assert 'inside LSF job 4242 with jsrun on PATH: launching with jsrun' in r.stderr
    assert len(lsf.log()['rankfile'].splitlines()) > 2
    os.remove(str(tmp_path / 'jsrun.json'))
    r = run('--gloo', '-np', '1', 'true', extra_env=lsf(LSB_MCPU_HOSTS='batch1 1 node1 2'))
    assert r.returncode == 0, r.stderr
    assert 'launching with jsrun' not in r.stderr and not os.path.exists(str(tmp_path / 'jsrun.json'))
    r = run('-np', '1', 'true', extra_env={'LSB_JOBID': '7', 'PATH': os.path.dirname(shutil.which('true'))})
    assert r.returncode == 0 and 'launching with jsrun' not in r.stderr, r.stderr
