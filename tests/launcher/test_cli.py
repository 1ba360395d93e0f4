"""Command line: -h, -v, --check-build, argparse-style parsing, flag -> HOROVOD_* mapping, and
--config-file precedence."""

import os
import re
import subprocess
import sys

import pytest

MAPPING = [
    (['--fusion-threshold-mb', '32'], {'HOROVOD_FUSION_THRESHOLD': '33554432'}),
    (['--fusion-threshold-mb', '0'], {'HOROVOD_FUSION_THRESHOLD': '0'}),
    (['--cycle-time-ms', '20'], {'HOROVOD_CYCLE_TIME': '20.0'}),
    (['--cycle-time-ms', '0.5'], {'HOROVOD_CYCLE_TIME': '0.5'}),
    (['--cycle-time-ms', '0.00001'], {'HOROVOD_CYCLE_TIME': '1e-05'}),
    (['--cache-capacity', '2048'], {'HOROVOD_CACHE_CAPACITY': '2048'}),
    (['--hierarchical-allreduce'], {'HOROVOD_HIERARCHICAL_ALLREDUCE': '1'}),
    (['--no-hierarchical-allreduce'], {'HOROVOD_HIERARCHICAL_ALLREDUCE': '0'}),
    (['--hierarchical-allgather'], {'HOROVOD_HIERARCHICAL_ALLGATHER': '1'}),
    (['--no-hierarchical-allgather'], {'HOROVOD_HIERARCHICAL_ALLGATHER': '0'}),
    (['--torus-allreduce'], {'HOROVOD_TORUS_ALLREDUCE': '1'}),
    (['--no-torus-allreduce'], {'HOROVOD_TORUS_ALLREDUCE': '0'}),
    (['--autotune', '--autotune-log-file', '/tmp/at.csv', '--autotune-warmup-samples', '5',
      '--autotune-steps-per-sample', '7', '--autotune-bayes-opt-max-samples', '9',
      '--autotune-gaussian-process-noise', '0.25'],
     {'HOROVOD_AUTOTUNE': '1', 'HOROVOD_AUTOTUNE_LOG': '/tmp/at.csv', 'HOROVOD_AUTOTUNE_WARMUP_SAMPLES': '5',
      'HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE': '7', 'HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES': '9',
      'HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE': '0.25'}),
    # Autotune sub-settings mean nothing without autotune: not exported.
    (['--autotune-warmup-samples', '5', '--autotune-log-file', '/tmp/x'], {}),
    (['--timeline-filename', '/tmp/tl.json', '--timeline-mark-cycles'],
     {'HOROVOD_TIMELINE': '/tmp/tl.json', 'HOROVOD_TIMELINE_MARK_CYCLES': '1'}),
    (['--timeline-mark-cycles'], {}),  # only together with a file name
    (['--no-stall-check'], {'HOROVOD_STALL_CHECK_DISABLE': '1'}),
    (['--stall-check'], {'HOROVOD_STALL_CHECK_DISABLE': '0'}),
    (['--stall-check-warning-time-seconds', '15', '--stall-check-shutdown-time-seconds', '90'],
     {'HOROVOD_STALL_CHECK_TIME_SECONDS': '15', 'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS': '90'}),
    (['--mpi-threads-disable'], {'HOROVOD_MPI_THREADS_DISABLE': '1'}),
    (['--tcp'], {'NCCL_IB_DISABLE': '1'}),
    (['--num-nccl-streams', '2'], {'HOROVOD_NUM_NCCL_STREAMS': '2'}),
    (['--thread-affinity', '3'], {'HOROVOD_THREAD_AFFINITY': '3'}),
    (['--gloo-timeout-seconds', '45'], {'HOROVOD_GLOO_TIMEOUT_SECONDS': '45'}),
    (['--log-level', 'DEBUG'], {'HOROVOD_LOG_LEVEL': 'DEBUG'}),
    (['--log-without-timestamp'], {'HOROVOD_LOG_HIDE_TIME': '1'}),
    (['--log-hide-timestamp'], {'HOROVOD_LOG_HIDE_TIME': '1'}),
    (['--log-with-timestamp'], {'HOROVOD_LOG_HIDE_TIME': '0'}),
    ([], {}),
]


@pytest.mark.parametrize('flags,expected', MAPPING, ids=[' '.join(m[0]) or 'none' for m in MAPPING])
def test_flag_to_env(knobs, flags, expected):
    assert knobs(*flags) == expected


def test_equals_form_and_abbreviation(knobs):
    assert knobs('--fusion-threshold-mb=4', '--cycle-t', '3') == {
        'HOROVOD_FUSION_THRESHOLD': '4194304', 'HOROVOD_CYCLE_TIME': '3.0'}


def test_ambiguous_abbreviation(run):
    r = run('-np', '1', '--host', 'localhost:1', 'true')
    assert r.returncode == 2
    assert 'ambiguous option: --host' in r.stderr


def test_command_options_are_not_ours(run):
    # Everything after the command belongs to it, even if it looks like a launcher flag.
    r = run('-np', '1', 'echo', '--verbose', '-np', '7')
    assert r.stdout == '[0]<stdout>:--verbose -np 7\n'


def test_double_dash_separates_command(run):
    r = run('-np', '1', '--', 'echo', 'x')
    assert r.stdout == '[0]<stdout>:x\n'


ELASTIC_ONLY_FLAGS = [('--max-np', '4'), ('--slots-per-host', '2'), ('--elastic-timeout', '60'),
                      ('--reset-limit', '3'), ('--blacklist-cooldown-range', '10', '100')]


@pytest.mark.parametrize('flag', ELASTIC_ONLY_FLAGS, ids=[f[0] for f in ELASTIC_ONLY_FLAGS])
def test_elastic_only_flags_are_ignored_with_a_warning_in_a_fixed_job(run, flag):
    # As in Horovod, a job without --min-np or a discovery script runs without them; we say so.
    r = run('-np', '2', *flag, '-H', 'localhost:2', 'sh', '-c', 'echo ran')
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('ran') == 2, r.stdout
    assert '{} is ignored: this job is not elastic'.format(flag[0]) in r.stderr, r.stderr


def test_ignored_elastic_flags_are_named_in_one_warning(run):
    r = run('-np', '1', '--max-np', '4', '--reset-limit', '2', 'true')
    assert r.returncode == 0, r.stderr
    assert r.stderr.count('warning') == 1, r.stderr
    assert '--max-np, --reset-limit are ignored: this job is not elastic' in r.stderr, r.stderr


def test_elastic_jobs_do_not_warn_about_elastic_flags(run):
    r = run('-np', '1', '--min-np', '1', '--max-np', '1', '-H', 'localhost:1,127.0.0.1:1', 'true')
    assert 'not elastic' not in r.stderr, r.stderr


def test_fault_tolerance_needs_two_hosts(run):
    r = run('-np', '2', '--min-np', '1', '-H', 'localhost:2', 'sh', '-c', 'echo ran')
    assert r.returncode == 2
    assert 'Cannot run in fault tolerance mode with fewer than 2 hosts.' in r.stderr, r.stderr


def test_elastic_needs_hosts(run):
    r = run('-np', '2', '--min-np', '1', 'sh', '-c', 'echo ran')
    assert r.returncode == 2
    assert 'One of --host-discovery-script, --hosts, or --hostnames must be provided' in r.stderr, r.stderr


def test_elastic_refuses_mpi(run):
    r = run('-np', '2', '--min-np', '1', '-H', 'localhost:1,127.0.0.1:1', '--mpi', 'sh', '-c', 'echo ran')
    assert r.returncode == 2
    assert 'Gloo support is required to use elastic training' in r.stderr, r.stderr


def test_bad_discovery_line(run, tmp_path):
    script = tmp_path / 'discover.sh'
    script.write_text('#!/bin/sh\necho localhost:two\n')
    script.chmod(0o755)
    r = run('-np', '1', '--host-discovery-script', script, 'sh', '-c', 'echo ran')
    assert r.returncode == 2
    assert "host discovery script printed an invalid line: 'localhost:two'" in r.stderr, r.stderr


def test_help(run):
    r = run('-h')
    assert r.returncode == 0
    for group in ('optional arguments:', 'SSH arguments:', 'tuneable parameter arguments:', 'autotune arguments:',
                  'elastic arguments:', 'timeline arguments:', 'stall check arguments:', 'library arguments:',
                  'logging arguments:', 'host arguments:', 'controller arguments:'):
        assert group in r.stdout
    for flag in ('-np NP, --num-proc NP', '-H HOSTS, --hosts HOSTS', '--fusion-threshold-mb', '--mpi-args',
                 '--output-filename', '--config-file', '-p SSH_PORT, --ssh-port SSH_PORT', '--gloo', '--mpi'):
        assert flag in r.stdout, flag
    assert '--status-file' not in r.stdout  # internal
    assert run('--help').stdout == r.stdout


def test_version(run):
    for flag in ('-v', '--version'):
        r = run(flag)
        assert (r.returncode, r.stdout) == (0, '0.28.1\n')


def test_check_build_format(run):
    r = run('--check-build', timeout=180)
    assert r.returncode == 0, r.stderr
    pattern = (r'Horovod v0\.28\.1:\n\n'
               r'Available Frameworks:\n    \[[X ]\] TensorFlow\n    \[[X ]\] PyTorch\n    \[ \] MXNet\n\n'
               r'Available Controllers:\n    \[[X ]\] MPI\n    \[X\] Gloo\n\n'
               r'Available Tensor Operations:\n    \[[X ]\] NCCL\n    \[ \] DDL\n    \[ \] CCL\n    \[[X ]\] MPI\n'
               r'    \[X\] Gloo\n'
               r'(\nCUDA is built into this Horovod, NCCL [^\n]*\n  CUDA runtime: [^\n]*\n  NCCL: [^\n]*\n)?'
               r'(\nMPI is not built into this Horovod \(horovod.mpi_built\(\) is False\)\. [^\n]*\n[^\n]*\n[^\n]*\n'
               r'|\nMPI starts jobs run under plain mpirun/mpiexec [^\n]*\n(?:[^\n]+\n){7})?')
    assert re.fullmatch(pattern, r.stdout), r.stdout


def _check_build_sections(stdout):
    sections = {}
    for block in stdout.split('\n\n'):
        lines = block.splitlines()
        if lines and lines[0].startswith('Available '):
            sections[lines[0].rstrip(':')] = lines[1:]
    return sections


def test_check_build_mpi_is_what_is_built(run, hvdrun):
    # MPI is marked only when it is built in, exactly when horovod.mpi_built() says so; an mpirun
    # on PATH (which --mpi can use) is reported separately, not as an MPI controller.
    import shutil
    r = run('--check-build', timeout=180)
    assert r.returncode == 0, r.stderr
    sections = _check_build_sections(r.stdout)
    controller = '    [X] MPI' in sections['Available Controllers']
    # The MPI plugin carries both the MPI start/rendezvous and the MPI data plane
    # (HOROVOD_CPU_OPERATIONS=mpi); the note says which data plane runs by default.
    assert ('    [X] MPI' in sections['Available Tensor Operations']) == controller, r.stdout
    assert ('HOROVOD_CPU_OPERATIONS=mpi: MPI\'s own collectives' in r.stdout) == controller, r.stdout
    beside = os.path.join(os.path.dirname(hvdrun), 'python3')
    python = beside if os.access(beside, os.X_OK) else sys.executable
    probe = subprocess.run([python, '-c', 'from horovod import _core; print(bool(_core.mpi_built()))'],
                           capture_output=True, text=True, timeout=60, cwd='/')
    if probe.returncode == 0:
        assert controller == (probe.stdout.strip() == 'True'), r.stdout
    else:
        assert not controller, r.stdout  # no importable core: nothing is built
    mpirun = shutil.which('mpirun')
    note = 'horovodrun --mpi\ncan still start the processes with {};'.format(mpirun)
    assert (note in r.stdout) == (mpirun is not None and not controller), r.stdout


def test_check_build_honest_about_pytorch(hvdrun, tmp_path):
    # A python3 that can import nothing: PyTorch must be reported missing.
    fake = tmp_path / 'python3'
    fake.write_text('#!/bin/sh\nexit 1\n')
    fake.chmod(0o755)
    import os
    import shutil
    import subprocess
    # horovodrun prefers the python3 next to itself (a venv's), so run a copy beside the fake.
    binary = tmp_path / 'horovodrun'
    shutil.copy(hvdrun, binary)
    env = dict(os.environ, PATH='{}:{}'.format(tmp_path, os.environ['PATH']))
    r = subprocess.run([str(binary), '-cb'], env=env, capture_output=True, text=True, timeout=60)
    assert '    [ ] PyTorch\n' in r.stdout
    assert '    [ ] TensorFlow\n' in r.stdout


# ---- --config-file ------------------------------------------------------------------------------

CONFIG = """\
# Horovod config
params:
  fusion_threshold_mb: 32        # MB
  cycle_time_ms: 10
  cache_capacity: 512
  hierarchical_allreduce: true
  hierarchical_allgather: false
autotune:
  enabled: true
  warmup_samples: 4
  gaussian_process_noise: 0.5
timeline: {filename: "/tmp/timeline.json", mark_cycles: yes}
stall_check:
  enabled: false
  warning_time_seconds: 20
library_options:
  num_nccl_streams: 2
  gloo_timeout_seconds: 40
logging:
  level: info
  with_timestamp: false
"""


def test_config_file_values(knobs, tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text(CONFIG)
    assert knobs('--config-file', config) == {
        'HOROVOD_FUSION_THRESHOLD': str(32 * 1024 * 1024), 'HOROVOD_CYCLE_TIME': '10.0',
        'HOROVOD_CACHE_CAPACITY': '512', 'HOROVOD_HIERARCHICAL_ALLREDUCE': '1',
        'HOROVOD_HIERARCHICAL_ALLGATHER': '0', 'HOROVOD_AUTOTUNE': '1', 'HOROVOD_AUTOTUNE_WARMUP_SAMPLES': '4',
        'HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE': '0.5', 'HOROVOD_TIMELINE': '/tmp/timeline.json',
        'HOROVOD_TIMELINE_MARK_CYCLES': '1', 'HOROVOD_STALL_CHECK_DISABLE': '1',
        'HOROVOD_STALL_CHECK_TIME_SECONDS': '20', 'HOROVOD_NUM_NCCL_STREAMS': '2',
        'HOROVOD_GLOO_TIMEOUT_SECONDS': '40', 'HOROVOD_LOG_LEVEL': 'INFO', 'HOROVOD_LOG_HIDE_TIME': '1',
    }


@pytest.mark.parametrize('position', ['before', 'after'])
def test_command_line_wins_over_config(knobs, tmp_path, position):
    config = tmp_path / 'c.yaml'
    config.write_text(CONFIG)
    flags = ['--fusion-threshold-mb', '8', '--no-hierarchical-allreduce', '--stall-check', '--log-level', 'ERROR']
    args = ['--config-file', str(config)]
    args = args + flags if position == 'after' else flags + args
    seen = knobs(*args)
    assert seen['HOROVOD_FUSION_THRESHOLD'] == str(8 * 1024 * 1024)
    assert seen['HOROVOD_HIERARCHICAL_ALLREDUCE'] == '0'
    assert seen['HOROVOD_STALL_CHECK_DISABLE'] == '0'
    assert seen['HOROVOD_LOG_LEVEL'] == 'ERROR'
    assert seen['HOROVOD_CYCLE_TIME'] == '10.0'  # not on the command line: from the file


def test_config_validation_after_merge(run, tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('params:\n  cache_capacity: -4\n')
    r = run('-np', '1', '--config-file', config, 'true')
    assert r.returncode == 2
    assert 'cache_capacity=-4 must be >= 0' in r.stderr


def test_config_controller(run, tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('controller: carrier-pigeon\n')
    r = run('-np', '1', '--config-file', config, 'true')
    assert r.returncode == 2
    assert 'No such controller supported: carrier-pigeon' in r.stderr
    config.write_text('controller: gloo\n')
    assert run('-np', '1', '--config-file', config, 'true').returncode == 0


@pytest.mark.parametrize('text,line,fragment', [
    ('params:\n\tfusion_threshold_mb: 1\n', 2, 'tabs'),
    ('params:\n  fusion_threshold_mb 1\n', 2, "expected 'key: value'"),
    ('params:\n  - 1\n', 2, 'sequences are not supported'),
    ('params:\n  cycle_time_ms: 1\n  cycle_time_ms: 2\n', 3, "duplicate key 'cycle_time_ms'"),
    ('# c\n\nparams:\n  fusion_threshold_mb: lots\n', 4, "expected an integer, got 'lots'"),
    ('autotune:\n  enabled: maybe\n', 2, 'expected true or false'),
    ('timeline:\n  filename: "unterminated\n', 2, 'unterminated quoted string'),
])
def test_config_errors_name_the_line(run, tmp_path, text, line, fragment):
    config = tmp_path / 'c.yaml'
    config.write_text(text)
    r = run('-np', '1', '--config-file', config, 'true')
    assert r.returncode == 2
    assert '{}:{}:'.format(config, line) in r.stderr and fragment in r.stderr, r.stderr


def test_config_unknown_keys_warn(run, tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('params:\n  fusion_threshold: 3\nextras:\n  a: 1\n')
    r = run('-np', '1', '--config-file', config, 'true')
    assert r.returncode == 0
    assert "unknown setting 'params.fusion_threshold'" in r.stderr
    assert "unknown section 'extras'" in r.stderr
