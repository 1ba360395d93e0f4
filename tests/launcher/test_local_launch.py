"""Local launches: worker environment, topology, output forwarding and per-rank files."""

import os
import re
import sys

import pytest

ENV_PROBE = ('echo R=$HOROVOD_RANK L=$HOROVOD_LOCAL_RANK S=$HOROVOD_SIZE LS=$HOROVOD_LOCAL_SIZE '
             'C=$HOROVOD_CROSS_RANK CS=$HOROVOD_CROSS_SIZE H=$HOROVOD_HOSTNAME')


def stdout_lines(result):
    return result.stdout.splitlines()


@pytest.mark.parametrize('np', [1, 2, 3, 4])
def test_env_per_rank(run, np):
    r = run('-np', np, 'sh', '-c', 'echo $HOROVOD_RANK $HOROVOD_LOCAL_RANK $HOROVOD_SIZE')
    assert r.returncode == 0, r.stderr
    expected = {'[{0}]<stdout>:{0} {0} {1}'.format(rank, np) for rank in range(np)}
    assert set(stdout_lines(r)) == expected


def test_full_topology_single_host(run):
    r = run('-np', 3, 'sh', '-c', ENV_PROBE)
    assert r.returncode == 0, r.stderr
    assert set(stdout_lines(r)) == {
        '[{0}]<stdout>:R={0} L={0} S=3 LS=3 C=0 CS=1 H=localhost'.format(rank) for rank in range(3)}


def test_two_local_names_give_two_hosts(run):
    # Both names are this machine, so no ssh; the slot assignment still sees two hosts.
    r = run('-np', 4, '-H', 'localhost:2,127.0.0.1:2', 'sh', '-c', ENV_PROBE)
    assert r.returncode == 0, r.stderr
    assert set(stdout_lines(r)) == {
        '[0]<stdout>:R=0 L=0 S=4 LS=2 C=0 CS=2 H=localhost',
        '[1]<stdout>:R=1 L=1 S=4 LS=2 C=0 CS=2 H=localhost',
        '[2]<stdout>:R=2 L=0 S=4 LS=2 C=1 CS=2 H=127.0.0.1',
        '[3]<stdout>:R=3 L=1 S=4 LS=2 C=1 CS=2 H=127.0.0.1',
    }


def test_uneven_hosts_cross_ranks(run):
    # localhost has 3 slots, 127.0.0.1 has 1: local rank 1 and 2 exist on one host only.
    r = run('-np', 4, '-H', 'localhost:3,127.0.0.1:1', 'sh', '-c', ENV_PROBE)
    assert r.returncode == 0, r.stderr
    assert set(stdout_lines(r)) == {
        '[0]<stdout>:R=0 L=0 S=4 LS=3 C=0 CS=2 H=localhost',
        '[1]<stdout>:R=1 L=1 S=4 LS=3 C=0 CS=1 H=localhost',
        '[2]<stdout>:R=2 L=2 S=4 LS=3 C=0 CS=1 H=localhost',
        '[3]<stdout>:R=3 L=0 S=4 LS=1 C=1 CS=2 H=127.0.0.1',
    }


def test_np_below_slots_starts_exactly_np(run):
    r = run('-np', 2, '-H', 'localhost:4', 'sh', '-c', 'echo $HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_LOCAL_SIZE')
    assert r.returncode == 0, r.stderr
    assert set(stdout_lines(r)) == {'[0]<stdout>:0 2 2', '[1]<stdout>:1 2 2'}


def test_hostfile(run, tmp_path):
    hostfile = tmp_path / 'hosts'
    hostfile.write_text('# two names for this machine\nlocalhost slots=1\n\n127.0.0.1 slots=2\n')
    r = run('-np', 3, '--hostfile', hostfile, 'sh', '-c', ENV_PROBE)
    assert r.returncode == 0, r.stderr
    assert set(stdout_lines(r)) == {
        '[0]<stdout>:R=0 L=0 S=3 LS=1 C=0 CS=2 H=localhost',
        '[1]<stdout>:R=1 L=0 S=3 LS=2 C=1 CS=2 H=127.0.0.1',
        '[2]<stdout>:R=2 L=1 S=3 LS=2 C=0 CS=1 H=127.0.0.1',
    }


def test_job_variables(run):
    probe = ('echo $HOROVOD_CONTROLLER $HOROVOD_CPU_OPERATIONS $HOROVOD_GLOO_IFACE $NCCL_SOCKET_IFNAME '
             '$HOROVOD_GLOO_RENDEZVOUS_ADDR $HOROVOD_GLOO_RENDEZVOUS_PORT $PYTHONUNBUFFERED $HOROVOD_SECRET_KEY')
    r = run('-np', 2, 'sh', '-c', probe)
    assert r.returncode == 0, r.stderr
    rows = [line.split(':', 1)[1].split() for line in stdout_lines(r)]
    assert len(rows) == 2
    for row in rows:
        controller, cpu_ops, iface, nccl_ifname, addr, port, unbuffered, secret = row
        assert (controller, cpu_ops, addr, unbuffered) == ('gloo', 'gloo', '127.0.0.1', '1')
        assert iface == nccl_ifname == 'lo'
        assert 0 < int(port) < 65536
        assert re.fullmatch('[0-9a-f]{64}', secret)
    assert rows[0] == rows[1]  # one job, one rendezvous, one secret

    again = run('-np', 1, 'sh', '-c', 'echo $HOROVOD_SECRET_KEY')
    assert again.stdout.split(':', 1)[1].strip() != rows[0][-1]  # a fresh secret per job


def test_rendezvous_server_is_listening(run):
    # Each worker connects to the advertised rendezvous address: the launcher's server is up.
    probe = ('python3 -c "import os,socket; socket.create_connection((os.environ[\'HOROVOD_GLOO_RENDEZVOUS_ADDR\'], '
             'int(os.environ[\'HOROVOD_GLOO_RENDEZVOUS_PORT\'])), timeout=5); print(\'connected\')"')
    r = run('-np', 2, 'sh', '-c', probe)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(stdout_lines(r)) == ['[0]<stdout>:connected', '[1]<stdout>:connected']


def test_environment_forwarding_and_exclusions(run):
    extra = {
        'HVD_TEST_PASSED': 'kept value',
        'OLDPWD': '/excluded',
        'MY_CUDA_VISIBLE_DEVICES': '3',
        'CUDA_VISIBLE_DEVICES': '1',
        '_HOROVOD_SECRET_KEY': 'a' * 64,
        'BASH_FUNC_foo%%': '() { true; }',
    }
    r = run('-np', 1, 'env', extra_env=extra)
    assert r.returncode == 0, r.stderr
    env = dict(line.split(':', 1)[1].split('=', 1) for line in stdout_lines(r) if '=' in line)
    assert env['HVD_TEST_PASSED'] == 'kept value'
    for name in ('OLDPWD', 'MY_CUDA_VISIBLE_DEVICES', 'CUDA_VISIBLE_DEVICES', '_HOROVOD_SECRET_KEY', 'BASH_FUNC_foo%%'):
        assert name not in env
    # horovod.run() hands its secret over this way: the job uses it.
    assert env['HOROVOD_SECRET_KEY'] == 'a' * 64


def test_preexisting_knob_passes_through_when_flag_absent(run):
    r = run('-np', 1, 'sh', '-c', 'echo $HOROVOD_FUSION_THRESHOLD', extra_env={'HOROVOD_FUSION_THRESHOLD': '12345'})
    assert r.stdout.strip() == '[0]<stdout>:12345'
    r = run('-np', 1, '--fusion-threshold-mb', 1, 'sh', '-c', 'echo $HOROVOD_FUSION_THRESHOLD',
            extra_env={'HOROVOD_FUSION_THRESHOLD': '12345'})
    assert r.stdout.strip() == '[0]<stdout>:1048576'


def test_malloc_hugepages_tunable(run):
    """Workers get glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES unless the user set that
    tunable or HOROVOD_MALLOC_HUGEPAGES=0; a malformed knob is a usage error."""
    probe = ('sh', '-c', 'echo "[$GLIBC_TUNABLES]"')
    cases = [({'GLIBC_TUNABLES': ''}, '[glibc.malloc.hugetlb=1]'),
             ({'GLIBC_TUNABLES': 'glibc.malloc.check=0'}, '[glibc.malloc.check=0:glibc.malloc.hugetlb=1]'),
             ({'GLIBC_TUNABLES': 'glibc.malloc.check=0:glibc.malloc.hugetlb=0'},
              '[glibc.malloc.check=0:glibc.malloc.hugetlb=0]'),
             ({'GLIBC_TUNABLES': '', 'HOROVOD_MALLOC_HUGEPAGES': '0'}, '[]'),
             ({'GLIBC_TUNABLES': 'glibc.malloc.check=0', 'HOROVOD_MALLOC_HUGEPAGES': 'off'},
              '[glibc.malloc.check=0]')]
    for extra, expected in cases:
        r = run('-np', 1, *probe, extra_env=extra)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == '[0]<stdout>:' + expected, extra
    r = run('-np', 1, *probe, extra_env={'HOROVOD_MALLOC_HUGEPAGES': 'maybe'})
    assert r.returncode == 2
    assert "HOROVOD_MALLOC_HUGEPAGES='maybe'" in r.stderr and 'docs/env-vars.md' in r.stderr


# A worker's view of one large malloc block: the kB of it backed by transparent huge pages.
THP_PROBE = r"""
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
n = 64 << 20
p = libc.malloc(n)
ctypes.memset(p, 1, n)
huge = None
with open('/proc/self/smaps') as f:
    for line in f:
        head = line.split()
        if '-' in head[0] and len(head) >= 5 and not head[0].endswith(':'):
            lo, hi = (int(x, 16) for x in head[0].split('-'))
            inside = lo <= p < hi
        elif inside and head[0] == 'AnonHugePages:':
            huge = int(head[1])
print('huge_kb', huge)
"""


def thp_mode():
    try:
        with open('/sys/kernel/mm/transparent_hugepage/enabled') as f:
            return f.read().split('[')[1].split(']')[0]
    except (OSError, IndexError):
        return 'never'


@pytest.mark.skipif(thp_mode() == 'never', reason='transparent huge pages are off on this kernel')
def test_malloc_hugepages_take_effect(run):
    """What the tunable is for: a large malloc block in a worker is backed by huge pages."""
    r = run('-np', 1, sys.executable, '-c', THP_PROBE, extra_env={'GLIBC_TUNABLES': ''})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) > 0, r.stdout
    if thp_mode() == 'madvise':  # only asked-for regions get them: opting out shows
        r = run('-np', 1, sys.executable, '-c', THP_PROBE,
                extra_env={'GLIBC_TUNABLES': '', 'HOROVOD_MALLOC_HUGEPAGES': '0'})
        assert r.returncode == 0, r.stderr
        assert int(r.stdout.split()[-1]) == 0, r.stdout


def test_worker_cwd_is_launcher_cwd(run, tmp_path):
    r = run('-np', 1, 'pwd', cwd=tmp_path)
    assert r.stdout.strip() == '[0]<stdout>:' + str(tmp_path)


# ---- output forwarding -------------------------------------------------------------------------

def test_stdout_and_stderr_prefixes(run):
    r = run('-np', 2, 'sh', '-c', 'echo out $HOROVOD_RANK; echo err $HOROVOD_RANK >&2')
    assert r.returncode == 0
    assert sorted(stdout_lines(r)) == ['[0]<stdout>:out 0', '[1]<stdout>:out 1']
    assert sorted(r.stderr.splitlines()) == ['[0]<stderr>:err 0', '[1]<stderr>:err 1']


def test_carriage_return_ends_a_line_and_partial_line_is_flushed(run):
    r = run('-np', 1, 'sh', '-c', 'printf "10%%\\r20%%\\rdone\\nno newline"')
    assert r.returncode == 0
    assert r.stdout == '[0]<stdout>:10%\r[0]<stdout>:20%\r[0]<stdout>:done\n[0]<stdout>:no newline'


def test_lines_split_across_writes_are_joined(run):
    r = run('-np', 1, 'sh', '-c', 'printf "hel"; sleep 0.2; printf "lo\\nwor"; sleep 0.2; printf "ld\\n"')
    assert r.stdout == '[0]<stdout>:hello\n[0]<stdout>:world\n'


def test_empty_lines_and_utf8(run):
    r = run('-np', 1, 'sh', '-c', 'printf "\\n\\303\\251t\\303\\251\\n"')
    assert r.stdout.splitlines() == ['[0]<stdout>:', '[0]<stdout>:été']


def test_large_output_is_complete(run):
    r = run('-np', 2, 'python3', '-c', 'import os\nfor i in range(20000): print(os.environ["HOROVOD_RANK"], i)')
    assert r.returncode == 0
    lines = stdout_lines(r)
    assert len(lines) == 40000
    for rank in (0, 1):
        mine = [line for line in lines if line.startswith('[{}]<stdout>:'.format(rank))]
        assert mine == ['[{0}]<stdout>:{0} {1}'.format(rank, i) for i in range(20000)]


def test_timestamp_prefix(run):
    r = run('-np', 1, '--prefix-output-with-timestamp', 'echo', 'hi')
    assert re.fullmatch(r'\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\[0\]<stdout>:hi\n', r.stdout), r.stdout


def test_output_filename(run, tmp_path):
    out = tmp_path / 'logs'
    r = run('-np', 2, '--output-filename', out, 'sh', '-c',
            'echo out $HOROVOD_RANK; echo err $HOROVOD_RANK >&2; printf partial')
    assert r.returncode == 0
    for rank in (0, 1):
        assert (out / 'rank.{}'.format(rank) / 'stdout').read_text() == \
            '[{0}]<stdout>:out {0}\n[{0}]<stdout>:partial'.format(rank)
        assert (out / 'rank.{}'.format(rank) / 'stderr').read_text() == '[{0}]<stderr>:err {0}\n'.format(rank)
    # Still forwarded to the terminal.
    assert '[1]<stdout>:out 1' in r.stdout


def test_output_filename_np1_does_not_crash(run, tmp_path):
    r = run('-np', 1, '--output-filename', tmp_path, 'echo', 'solo')
    assert r.returncode == 0, r.stderr
    assert (tmp_path / 'rank.0' / 'stdout').read_text() == '[0]<stdout>:solo\n'


def test_output_filename_zero_padding(run, tmp_path):
    r = run('-np', 11, '--output-filename', tmp_path, 'true')
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ['rank.{:02d}'.format(i) for i in range(11)]
