"""Remote workers started with LSF's blaunch instead of ssh inside an LSF job (LSB_JOBID set),
with a stand-in blaunch on PATH (fake_blaunch.py) and an `ssh` that only fails, so that a job
which used ssh shows. The stand-in runs the task on this machine, or, in the two-host test, in
the network namespace of its host."""

import json
import os
import shutil
import subprocess

import pytest

from launcher_util import ROOT, kill_leftovers, pgrep, wait_until

HERE = os.path.join(ROOT, 'tests', 'launcher')
pytestmark = pytest.mark.timeout(300)
SHOW = 'echo R=$HOROVOD_RANK H=$HOROVOD_HOSTNAME K=${#HOROVOD_SECRET_KEY} NS=$(ip netns identify 2>/dev/null)'
CHOSE_BLAUNCH = ('horovodrun: inside LSF job 4242 with blaunch on PATH: starting remote workers with blaunch '
                 '(--remote-launcher ssh keeps ssh)')


@pytest.fixture
def lsf(tmp_path):
    """extra_env(**more) for a job in LSF job 4242 with the stand-in blaunch and a failing ssh
    on PATH; .calls() -> the blaunch calls, .ssh_called() -> whether ssh ran."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    shutil.copy(os.path.join(HERE, 'fake_blaunch.py'), bin_dir / 'blaunch')
    ssh_log = tmp_path / 'ssh.log'
    (bin_dir / 'ssh').write_text('#!/bin/sh\necho "$@" >> {}\necho "ssh is blocked here" >&2\nexit 255\n'.format(
        ssh_log))
    (bin_dir / 'ssh').chmod(0o755)
    log = tmp_path / 'blaunch.jsonl'

    def extra_env(**more):
        env = {'PATH': '{}:{}'.format(bin_dir, os.environ['PATH']), 'FAKE_BLAUNCH_LOG': str(log),
               'LSB_JOBID': '4242', 'HOME': str(tmp_path)}  # HOME: the ssh-check cache
        env.update(more)
        return env

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    extra_env.calls = calls
    extra_env.ssh_called = ssh_log.exists
    extra_env.bin_dir = bin_dir
    return extra_env


def ranks_said(stdout):
    return sorted(line.split(':', 1)[1] for line in stdout.splitlines() if ':R=' in line)


def test_blaunch_starts_the_remote_workers_inside_lsf(run, lsf):
    # node1 and node2 stand for the other hosts of the allocation: the stand-in runs their tasks here.
    r = run('-np', '3', '-H', 'localhost:1,node1:1,node2:1', 'sh', '-c', SHOW, extra_env=lsf())
    assert r.returncode == 0, r.stderr
    assert CHOSE_BLAUNCH in r.stderr
    assert ranks_said(r.stdout) == ['R=0 H=localhost K=64 NS=', 'R=1 H=node1 K=64 NS=', 'R=2 H=node2 K=64 NS=']
    calls = lsf.calls()
    assert sorted(c['host'] for c in calls) == ['node1', 'node2']
    for c in calls:
        # blaunch <host> <command>: the command is the one ssh would run; the secret is not in it.
        assert c['argv'][1] == c['host'] and len(c['argv']) == 3 and c['lsb_jobid'] == '4242'
        assert not c['secret_in_argv']
    assert not lsf.ssh_called()


def test_elastic_jobs_use_blaunch_too(run, lsf):
    r = run('-np', '2', '--min-np', '2', '-H', 'node1:1,node2:1', 'sh', '-c', SHOW, extra_env=lsf())
    assert r.returncode == 0, r.stderr
    assert CHOSE_BLAUNCH in r.stderr
    assert ranks_said(r.stdout) == ['R=0 H=node1 K=64 NS=', 'R=1 H=node2 K=64 NS=']
    assert sorted(c['host'] for c in lsf.calls()) == ['node1', 'node2'] and not lsf.ssh_called()


def test_a_failing_remote_worker_stops_the_others(run, lsf, marker):
    # The launcher stops a blaunch worker as an ssh one: by closing its stdin.
    try:
        r = run('-np', '2', '-H', 'node1:1,node2:1', 'sh', '-c',
                'if [ $HOROVOD_RANK = 1 ]; then exit 3; fi; sleep {}'.format(marker), extra_env=lsf())
        assert r.returncode == 1, r.stderr
        assert 'Process 1 exit with status code 3.' in r.stdout + r.stderr
        assert wait_until(lambda: not pgrep('sleep ' + marker), 30), 'rank 0 outlived the job'
    finally:
        kill_leftovers('sleep ' + marker)


def test_ssh_flags_and_the_option_keep_ssh(run, lsf, tmp_path):
    for flags, note in ((['-i', '/dev/null'], 'horovodrun: inside LSF job 4242: starting remote workers with ssh, '
                                              'as --ssh-port/--ssh-identity-file ask'),
                        (['--remote-launcher', 'ssh'], None)):
        r = run('-np', '1', '-H', 'node1:1', '--start-timeout', '10', *flags, 'true', extra_env=lsf())
        assert r.returncode != 0 and lsf.ssh_called(), r.stderr  # the failing ssh ran
        assert 'node1' in r.stderr, r.stderr
        assert (note in r.stderr) if note else ('starting remote workers with' not in r.stderr), r.stderr
        assert lsf.calls() == []
        os.remove(str(tmp_path / 'ssh.log'))
    # Outside an LSF job, blaunch on PATH changes nothing.
    env = lsf()
    del env['LSB_JOBID']
    r = run('-np', '1', '-H', 'node1:1', '--start-timeout', '10', 'true', extra_env=env)
    assert r.returncode != 0 and lsf.ssh_called() and lsf.calls() == [], r.stderr


def test_remote_launcher_choices_are_checked(run, lsf, tmp_path):
    r = run('-np', '1', '--remote-launcher', 'rsh', 'true')
    assert r.returncode == 2
    assert "argument --remote-launcher: invalid choice: 'rsh' (choose from 'ssh', 'blaunch')" in r.stderr, r.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith('LSB_')}
    r = run('-np', '1', '-H', 'node1:1', '--remote-launcher', 'blaunch', 'true', env=env)
    assert r.returncode == 2
    assert ('--remote-launcher blaunch: blaunch starts tasks only inside an LSF job, and LSB_JOBID is not set'
            in r.stderr), r.stderr
    r = run('-np', '1', '-H', 'node1:1', '--remote-launcher', 'blaunch', 'true',
            extra_env={'LSB_JOBID': '7', 'PATH': os.path.dirname(shutil.which('true'))})
    assert r.returncode == 2
    assert '--remote-launcher blaunch: LSF job 7, but blaunch is not on PATH' in r.stderr, r.stderr
    # Asked for, blaunch wins over the ssh flags.
    r = run('-np', '1', '-H', 'node1:1', '-p', '2222', '--remote-launcher', 'blaunch', 'true', extra_env=lsf())
    assert r.returncode == 0, r.stderr
    assert 'horovodrun: starting remote workers with blaunch (LSF job 4242)' in r.stderr
    assert [c['host'] for c in lsf.calls()] == ['node1'] and not lsf.ssh_called()


@pytest.fixture
def two_hosts(tmp_path):
    """Two network namespaces on a bridge: (net, ns_a, ns_b); the hosts are <net>.2 and <net>.3,
    this namespace <net>.1. Needs root and iproute2."""
    if os.geteuid() != 0 or shutil.which('ip') is None:
        pytest.skip('needs root and iproute2 (network namespaces)')

    def ip(*args):
        subprocess.run(['ip'] + list(args), check=True, capture_output=True, timeout=30)

    used = subprocess.run(['ip', '-4', 'addr', 'show'], capture_output=True, text=True).stdout
    net = next(('10.77.{}'.format(n) for n in range(1, 250) if 'inet 10.77.{}.'.format(n) not in used), None)
    if net is None:
        pytest.skip('no free 10.77.x.0/24 subnet')
    tag = os.getpid() % 100000
    bridge, names = 'hbb{}'.format(tag), ['hbl{}a'.format(tag), 'hbl{}b'.format(tag)]
    try:
        ip('netns', 'add', names[0])
    except subprocess.CalledProcessError:
        pytest.skip('cannot create network namespaces here')
    try:
        ip('netns', 'add', names[1])
        ip('link', 'add', bridge, 'type', 'bridge')
        ip('addr', 'add', net + '.1/24', 'dev', bridge)
        ip('link', 'set', bridge, 'up')
        for i, ns in enumerate(names):
            veth, peer = 'hbv{}{}'.format(tag, i), 'hbp{}{}'.format(tag, i)
            ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', peer)
            ip('link', 'set', peer, 'netns', ns)
            ip('link', 'set', veth, 'master', bridge, 'up')
            ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up')
            ip('netns', 'exec', ns, 'ip', 'addr', 'add', '{}.{}/24'.format(net, i + 2), 'dev', peer)
            ip('netns', 'exec', ns, 'ip', 'link', 'set', peer, 'up')
        yield net, names[0], names[1]
    finally:
        for ns in names:
            for pid in subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True, text=True).stdout.split():
                try:
                    os.kill(int(pid), 9)  # a leftover of the test
                except OSError:
                    pass
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
        subprocess.run(['ip', 'link', 'del', bridge], capture_output=True)


def test_blaunch_across_two_hosts(run, lsf, two_hosts, check_program):
    net, ns_a, ns_b = two_hosts
    host_a, host_b = net + '.2', net + '.3'
    env = lsf(FAKE_BLAUNCH_NETNS='{}={},{}={}'.format(host_a, ns_a, host_b, ns_b))
    hosts = '{}:2,{}:2'.format(host_a, host_b)
    r = run('-np', '4', '-H', hosts, 'sh', '-c', SHOW, extra_env=env)
    assert r.returncode == 0, r.stderr
    assert CHOSE_BLAUNCH in r.stderr
    assert ranks_said(r.stdout) == ['R={} H={} K=64 NS={}'.format(rank, host, ns) for rank, host, ns in
                                    [(0, host_a, ns_a), (1, host_a, ns_a), (2, host_b, ns_b), (3, host_b, ns_b)]]
    # The real core across the namespaces: the rendezvous on this side, the data over the bridge.
    r = run('-np', '4', '-H', hosts, check_program, timeout=120, extra_env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if 'allreduce ok' in line)
    assert len(lines) == 4, r.stdout
    assert all(' size=4 ' in line and ' sum=10 ' in line for line in lines), lines
    assert not lsf.ssh_called()
