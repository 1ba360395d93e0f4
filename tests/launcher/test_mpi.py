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
            'echo ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} $HOROVOD_FUSION_THRESHOLD ${#HOROVOD_SECRET_KEY}', timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(r.stdout.splitlines())
    if is_open_mpi():
        assert lines == ['[1,0]<stdout>:0 2097152 64', '[1,1]<stdout>:1 2097152 64']
    else:
        assert len(lines) == 2 and all(l.endswith(' 2097152 64') for l in lines)


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
    command = [l for l in r.stderr.splitlines() if l.startswith('horovodrun: running ')][0]
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
