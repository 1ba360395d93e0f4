"""--mpi: delegation to mpirun (Open MPI here), its exit status, and the exported knobs."""

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which('mpirun') is None, reason='mpirun not installed')


def is_open_mpi():
    out = subprocess.run(['mpirun', '--version'], capture_output=True, text=True, timeout=30)
    return 'Open MPI' in out.stdout + out.stderr or 'OpenRTE' in out.stdout + out.stderr


def test_mpi_runs_ranks_with_tagged_output(run):
    r = run('--mpi', '-np', '2', '--fusion-threshold-mb', '2', 'sh', '-c',
            'echo ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} $HOROVOD_FUSION_THRESHOLD ${#HOROVOD_SECRET_KEY} '
            '$GLIBC_TUNABLES', timeout=120, extra_env={'GLIBC_TUNABLES': ''})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(r.stdout.splitlines())
    tail = ' 2097152 64 glibc.malloc.hugetlb=1'
    if is_open_mpi():
        assert lines == ['[1,0]<stdout>:0' + tail, '[1,1]<stdout>:1' + tail]
    else:
        assert len(lines) == 2 and all(line.endswith(tail) for line in lines)


def test_mpi_exit_status_is_mpiruns(run):
    r = run('--mpi', '-np', '2', 'sh', '-c', 'exit 3', timeout=120)
    assert r.returncode != 0
    direct = subprocess.run(['mpirun', '--allow-run-as-root', '-np', '2', 'sh', '-c', 'exit 3'],
                            capture_output=True, timeout=120)
    assert r.returncode == direct.returncode


@pytest.mark.skipif(not is_open_mpi(), reason='command shape checked for Open MPI')
def test_mpirun_command_shape(run):
    r = run('--mpi', '--verbose', '-np', '2', '-H', 'localhost:2', '-p', '2222', '-i', '/tmp/key',
            '--mpi-args=--report-bindings', '--cycle-time-ms', '5', 'echo', 'a b', timeout=120)
    assert r.returncode == 0, r.stderr
    command = [line for line in r.stderr.splitlines() if line.startswith('horovodrun: running ')][0]
    command = command[len('horovodrun: running '):]
    import os
    if os.geteuid() == 0:
        assert command.startswith('mpirun --allow-run-as-root --tag-output -np 2 -H localhost:2 ')
    assert '-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib' in command
    assert "-mca plm_rsh_args '-p 2222 -i /tmp/key'" in command
    assert '-x HOROVOD_CYCLE_TIME ' in command and '-x HOROVOD_SECRET_KEY ' in command
    assert os.environ.get('HOROVOD_SECRET_KEY', 'no-secret-in-test-env') not in command
    assert command.endswith("--report-bindings 'echo' 'a b'")
    assert sorted(r.stdout.splitlines()) == ['[1,0]<stdout>:a b', '[1,1]<stdout>:a b']


def test_config_file_selects_mpi(run, tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('controller: mpi\n')
    r = run('--config-file', config, '-np', '1', 'sh', '-c', 'echo ${OMPI_COMM_WORLD_SIZE:-$PMI_SIZE}', timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(':1')
    # --gloo on the command line overrides the file's controller.
    r = run('--config-file', config, '--gloo', '-np', '1', 'sh', '-c', 'echo $HOROVOD_CONTROLLER')
    assert r.stdout == '[0]<stdout>:gloo\n'


# ---- other MPI implementations, through a fake mpirun -------------------------------------------

FAKE_MPIRUN = '''#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "{banner}"
  exit 0
fi
printf '%s\\n' "$@" > {argfile}
env > {envfile}
exit {code}
'''


@pytest.fixture
def fake_mpirun(tmp_path):
    def _make(banner, code=0):
        bindir = tmp_path / 'bin'
        bindir.mkdir(exist_ok=True)
        script = bindir / 'mpirun'
        script.write_text(FAKE_MPIRUN.format(banner=banner, argfile=tmp_path / 'args', envfile=tmp_path / 'env',
                                             code=code))
        script.chmod(0o755)
        import os
        return {'PATH': '{}:{}'.format(bindir, os.environ['PATH'])}, tmp_path / 'args', tmp_path / 'env'
    return _make


def test_mpich_command(run, fake_mpirun):
    env, argfile, envfile = fake_mpirun('HYDRA build details:\n    Version: 4.0')
    r = run('--mpi', '-np', '4', '-H', 'h1:2,h2:2', '-p', '2022', '--network-interface', 'lo',
            '--output-filename', '/tmp/out', '--mpi-args=-verbose', 'python', 'train.py', extra_env=env)
    assert r.returncode == 0, r.stderr
    args = argfile.read_text().splitlines()
    # /bin/sh -c split the command line the launcher built.
    assert args[:9] == ['-l', '-np', '4', '-hosts', 'h1,h2', '-ppn', '2', '-bootstrap=ssh', '-bootstrap-exec-args']
    assert args[9] == '-p 2022'
    assert args[10:15] == ['-iface', 'lo', '-genv', 'NCCL_SOCKET_IFNAME', 'lo']
    assert args[15:19] == ['-outfile-pattern', '/tmp/out/rank.%r/stdout', '-errfile-pattern', '/tmp/out/rank.%r/stderr']
    assert args[19:] == ['-verbose', 'python', 'train.py']
    assert '-x' not in args  # Hydra forwards the environment itself
    assert 'HOROVOD_SECRET_KEY=' in envfile.read_text()


def test_mpich_requires_equal_slots(run, fake_mpirun):
    env, _, _ = fake_mpirun('MPICH Version: 3.4')
    r = run('--mpi', '-np', '3', '-H', 'h1:2,h2:1', 'true', extra_env=env)
    assert r.returncode == 2
    assert 'same number of slots on every host' in r.stderr


def test_intel_mpi_one_interface(run, fake_mpirun):
    env, _, _ = fake_mpirun('Intel(R) MPI Library for Linux* OS, Version 2021')
    r = run('--mpi', '-np', '1', '--network-interfaces', 'lo,lo', 'true', extra_env=env)
    assert r.returncode == 2
    assert 'only one network interface' in r.stderr


def test_spectrum_binding_and_tcp(run, fake_mpirun):
    env, argfile, _ = fake_mpirun('mpirun (IBM Spectrum MPI) 10.4.0.0')
    r = run('--mpi', '-np', '2', '--tcp', 'true', extra_env=env)
    assert r.returncode == 0, r.stderr
    text = ' '.join(argfile.read_text().splitlines())
    assert '-bind-to socket -map-by socket -rank-by core' in text
    assert ' -tcp ' in text
    assert '-mca pml ob1' not in text


def test_binding_args_replace_default(run, fake_mpirun):
    env, argfile, _ = fake_mpirun('mpirun (Open MPI) 4.1.4')
    r = run('--mpi', '-np', '2', '--binding-args=-bind-to core', 'true', extra_env=env)
    assert r.returncode == 0, r.stderr
    text = ' '.join(argfile.read_text().splitlines())
    assert '-bind-to core' in text and '-map-by slot' not in text


def test_unknown_mpi(run, fake_mpirun):
    env, _, _ = fake_mpirun('SomeVendor MPI 1.0')
    r = run('--mpi', '-np', '1', 'true', extra_env=env)
    assert r.returncode == 1
    assert 'does not recognize the MPI implementation' in r.stderr


def test_mpirun_exit_status_passes_through(run, fake_mpirun):
    env, _, _ = fake_mpirun('mpirun (Open MPI) 4.1.4', code=42)
    assert run('--mpi', '-np', '1', 'true', extra_env=env).returncode == 42


def test_many_hosts_disable_tree_spawn(run, fake_mpirun):
    env, argfile, _ = fake_mpirun('mpirun (Open MPI) 4.1.4')
    hosts = ','.join('node{}:1'.format(i) for i in range(64))
    r = run('--mpi', '-np', '64', '-H', hosts, '--network-interface', 'lo', 'true', extra_env=env)
    assert r.returncode == 0, r.stderr
    text = ' '.join(argfile.read_text().splitlines())
    assert '-mca plm_rsh_no_tree_spawn true -mca plm_rsh_num_concurrent 64' in text
