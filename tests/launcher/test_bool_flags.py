"""horovodrun's boolean flags, each with its opposite, as Horovod 0.28.1 declares them (argparse
mutually exclusive groups of make_override_true_action / make_override_false_action): both
forms export their value, the two cannot be combined, and either one given on the command line
wins over the --config-file value wherever --config-file appears, while the file wins over the
default. Then the behaviour behind some of them end to end: core log timestamps, autotune and the
stall check, each switched back by a flag against a config file that says otherwise."""

import os
import re
import subprocess
import sys

import pytest


PYTHON = sys.executable

# (positive flag, negative flag, config section, config key, variable, value for the positive
#  flag, value for the negative one, flags the variable needs to be exported at all)
PAIRS = [
    ('--hierarchical-allreduce', '--no-hierarchical-allreduce', 'params', 'hierarchical_allreduce',
     'HOROVOD_HIERARCHICAL_ALLREDUCE', '1', '0', []),
    ('--hierarchical-allgather', '--no-hierarchical-allgather', 'params', 'hierarchical_allgather',
     'HOROVOD_HIERARCHICAL_ALLGATHER', '1', '0', []),
    ('--torus-allreduce', '--no-torus-allreduce', 'params', 'torus_allreduce', 'HOROVOD_TORUS_ALLREDUCE', '1', '0',
     []),
    ('--autotune', '--no-autotune', 'autotune', 'enabled', 'HOROVOD_AUTOTUNE', '1', '0', []),
    ('--timeline-mark-cycles', '--no-timeline-mark-cycles', 'timeline', 'mark_cycles',
     'HOROVOD_TIMELINE_MARK_CYCLES', '1', '0', ['--timeline-filename', '/tmp/unused-timeline.json']),
    ('--stall-check', '--no-stall-check', 'stall_check', 'enabled', 'HOROVOD_STALL_CHECK_DISABLE', '0', '1', []),
    ('--mpi-threads-disable', '--no-mpi-threads-disable', 'library_options', 'mpi_threads_disable',
     'HOROVOD_MPI_THREADS_DISABLE', '1', '0', []),
    ('--log-with-timestamp', '--log-without-timestamp', 'logging', 'with_timestamp', 'HOROVOD_LOG_HIDE_TIME', '0',
     '1', []),
]
PAIR_IDS = [p[0] for p in PAIRS]

# Every option of Horovod 0.28.1's horovodrun (horovod/runner/launch.py parse_args), -h included.
HOROVOD_FLAGS = [
    '-h', '--help', '-v', '--version', '-np', '--num-proc', '-cb', '--check-build', '--disable-cache',
    '--start-timeout', '--network-interfaces', '--network-interface', '--output-filename', '--verbose',
    '--config-file', '-p', '--ssh-port', '-i', '--ssh-identity-file', '--fusion-threshold-mb', '--cycle-time-ms',
    '--cache-capacity', '--hierarchical-allreduce', '--no-hierarchical-allreduce', '--hierarchical-allgather',
    '--no-hierarchical-allgather', '--torus-allreduce', '--no-torus-allreduce', '--autotune', '--no-autotune',
    '--autotune-log-file', '--autotune-warmup-samples', '--autotune-steps-per-sample',
    '--autotune-bayes-opt-max-samples', '--autotune-gaussian-process-noise', '--min-np', '--min-num-proc',
    '--max-np', '--max-num-proc', '--slots-per-host', '--elastic-timeout', '--reset-limit',
    '--blacklist-cooldown-range', '--timeline-filename', '--timeline-mark-cycles', '--no-timeline-mark-cycles',
    '--no-stall-check', '--stall-check', '--stall-check-warning-time-seconds', '--stall-check-shutdown-time-seconds',
    '--mpi-threads-disable', '--no-mpi-threads-disable', '--mpi-args', '--tcp', '--binding-args',
    '--num-nccl-streams', '--thread-affinity', '--gloo-timeout-seconds', '--log-level', '--log-with-timestamp',
    '--log-without-timestamp', '-prefix-timestamp', '--prefix-output-with-timestamp', '--log-hide-timestamp',
    '--no-log-hide-timestamp', '-H', '--hosts', '-hostfile', '--hostfile', '--host-discovery-script', '--gloo',
    '--mpi', '--jsrun',
]


def _config(tmp_path, section, key, value):
    path = tmp_path / 'c.yaml'
    path.write_text('{}:\n  {}: {}\n'.format(section, key, 'true' if value else 'false'))
    return str(path)


@pytest.mark.parametrize('pair', PAIRS, ids=PAIR_IDS)
def test_each_form_exports_its_value(knobs, pair):
    on, off, _, _, var, on_value, off_value, needs = pair
    assert knobs(*needs, on).get(var) == on_value
    assert knobs(*needs, off).get(var) == off_value
    assert var not in knobs(*needs)  # neither form: nothing exported, the worker's default applies


@pytest.mark.parametrize('pair', PAIRS, ids=PAIR_IDS)
def test_config_file_value_applies_without_a_flag(knobs, tmp_path, pair):
    on, off, section, key, var, on_value, off_value, needs = pair
    assert knobs(*needs, '--config-file', _config(tmp_path, section, key, True)).get(var) == on_value
    assert knobs(*needs, '--config-file', _config(tmp_path, section, key, False)).get(var) == off_value


@pytest.mark.parametrize('position', ['before', 'after'])
@pytest.mark.parametrize('pair', PAIRS, ids=PAIR_IDS)
def test_flag_wins_over_config_file(knobs, tmp_path, pair, position):
    on, off, section, key, var, on_value, off_value, needs = pair
    for config_value, flag, expected in ((True, off, off_value), (False, on, on_value),
                                         (True, on, on_value), (False, off, off_value)):
        config = ['--config-file', _config(tmp_path, section, key, config_value)]
        args = config + [flag] if position == 'after' else [flag] + config
        assert knobs(*needs, *args).get(var) == expected, (config_value, flag, position)


@pytest.mark.parametrize('pair', PAIRS, ids=PAIR_IDS)
def test_the_two_forms_exclude_each_other(run, pair):
    on, off = pair[0], pair[1]
    for first, second in ((on, off), (off, on)):
        r = run('-np', '1', first, second, 'sh', '-c', 'echo ran')
        assert r.returncode == 2, r.stdout + r.stderr
        assert 'ran' not in r.stdout
        assert 'argument {}: not allowed with argument {}'.format(second, first) in r.stderr, r.stderr
    # The same form twice is fine (argparse).
    assert run('-np', '1', on, on, 'true').returncode == 0


@pytest.mark.parametrize('flag,replacement,value', [
    ('--log-hide-timestamp', '--log-without-timestamp', '1'),
    ('--no-log-hide-timestamp', '--log-with-timestamp', '0'),
])
def test_deprecated_timestamp_spellings(run, tmp_path, flag, replacement, value):
    # Still work, warn as Horovod does, and override the config file like their replacements.
    config = _config(tmp_path, 'logging', 'with_timestamp', value == '1')
    r = run('-np', '1', '--config-file', config, flag, 'env')
    assert r.returncode == 0, r.stderr
    assert '[0]<stdout>:HOROVOD_LOG_HIDE_TIME={}\n'.format(value) in r.stdout
    assert 'Argument {} has been replaced by {}'.format(flag, replacement) in r.stderr, r.stderr
    # They belong to the timestamp group: not with the new spellings.
    r = run('-np', '1', flag, replacement, 'true')
    assert r.returncode == 2 and 'not allowed with argument ' + flag in r.stderr, r.stderr


def test_stall_check_section_without_enabled_enables_the_check(knobs, tmp_path):
    # Horovod's set_args_from_config: stall_check.enabled defaults to true once the section is there.
    config = tmp_path / 'c.yaml'
    config.write_text('stall_check:\n  warning_time_seconds: 7\n')
    assert knobs('--config-file', config) == {'HOROVOD_STALL_CHECK_DISABLE': '0',
                                              'HOROVOD_STALL_CHECK_TIME_SECONDS': '7'}
    assert knobs('--config-file', config, '--no-stall-check')['HOROVOD_STALL_CHECK_DISABLE'] == '1'


def test_help_lists_every_horovod_flag(run):
    r = run('-h')
    assert r.returncode == 0
    listed = set(re.findall(r'(?<![\w-])(--?[a-zA-Z][a-z0-9-]*)', r.stdout))
    missing = [f for f in HOROVOD_FLAGS if f not in listed]
    assert not missing, missing
    for pair in PAIRS:  # each negative form has its own line
        assert re.search(r'^  {}  '.format(re.escape(pair[1])), r.stdout, re.M), pair[1]


def test_every_horovod_flag_is_accepted(run):
    # Parsed, not "unrecognized": each flag with a valid value on a job that then runs `true`.
    values = {'-np': '1', '--num-proc': '1', '--start-timeout': '30', '--network-interfaces': 'lo',
              '--network-interface': 'lo', '--output-filename': None, '--config-file': None, '-p': '22',
              '--ssh-port': '22', '-i': '/dev/null', '--ssh-identity-file': '/dev/null',
              '--fusion-threshold-mb': '1', '--cycle-time-ms': '1', '--cache-capacity': '1',
              '--autotune-log-file': '/dev/null', '--autotune-warmup-samples': '1',
              '--autotune-steps-per-sample': '1', '--autotune-bayes-opt-max-samples': '1',
              '--autotune-gaussian-process-noise': '0.5', '--timeline-filename': '/dev/null',
              '--stall-check-warning-time-seconds': '1', '--stall-check-shutdown-time-seconds': '2',
              '--mpi-args': '-x', '--binding-args': '-x', '--num-nccl-streams': '1', '--thread-affinity': '0',
              '--gloo-timeout-seconds': '30', '--log-level': 'INFO'}
    skip = {'-h', '--help', '-v', '--version', '-cb', '--check-build', '--jsrun', '--mpi',
            # elastic and host flags change the job; covered by their own tests
            '--min-np', '--min-num-proc', '--max-np', '--max-num-proc', '--slots-per-host', '--elastic-timeout',
            '--reset-limit', '--blacklist-cooldown-range', '-H', '--hosts', '-hostfile', '--hostfile',
            '--host-discovery-script', '--output-filename', '--config-file'}
    for flag in HOROVOD_FLAGS:
        if flag in skip:
            continue
        args = ['-np', '1'] if flag not in ('-np', '--num-proc') else []
        args += [flag] + ([values[flag]] if values.get(flag) else [])
        r = run(*args, 'true')
        assert r.returncode == 0, (flag, r.stderr)


# ---- what the flags do, end to end ---------------------------------------------------------------

STAMPED = re.compile(r'^\[\d\]<stdout>:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: DEBUG ', re.M)
UNSTAMPED = re.compile(r'^\[\d\]<stdout>:\[DEBUG ', re.M)


def test_log_timestamp_flags_against_config_file(run, check_program, tmp_path):
    hidden = _config(tmp_path, 'logging', 'with_timestamp', False)
    env = {k: v for k, v in os.environ.items() if k != 'HOROVOD_LOG_HIDE_TIME'}
    r = run('-np', 2, '--log-level', 'DEBUG', '--config-file', hidden, check_program, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert UNSTAMPED.search(r.stdout) and not STAMPED.search(r.stdout), r.stdout
    r = run('-np', 2, '--log-level', 'DEBUG', '--config-file', hidden, '--log-with-timestamp', check_program,
            env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert STAMPED.search(r.stdout) and not UNSTAMPED.search(r.stdout), r.stdout
    shown = _config(tmp_path, 'logging', 'with_timestamp', True)
    r = run('-np', 2, '--log-level', 'DEBUG', '--log-without-timestamp', '--config-file', shown, check_program,
            env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert UNSTAMPED.search(r.stdout) and not STAMPED.search(r.stdout), r.stdout


def test_no_autotune_against_config_file(run, check_program, tmp_path):
    # The config file turns autotuning on with a log file, which rank 0 creates when it tunes.
    log = tmp_path / 'autotune.csv'
    config = tmp_path / 'c.yaml'
    config.write_text('autotune:\n  enabled: true\n  log_file: {}\n'.format(log))
    env = {k: v for k, v in os.environ.items() if not k.startswith('HOROVOD_AUTOTUNE')}
    r = run('-np', 2, '--config-file', config, check_program, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.exists()
    log.unlink()
    r = run('-np', 2, '--config-file', config, '--no-autotune', check_program, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not log.exists()
    assert r.stdout.count(' sum=3 ') == 2, r.stdout


@pytest.fixture(scope='module')
def torch_adapter():
    probe = subprocess.run([PYTHON, '-c', 'import horovod.torch'], capture_output=True)
    if probe.returncode != 0:
        pytest.skip('horovod.torch is not importable by {}'.format(PYTHON))


# Rank 1 submits its allreduce 8 s after rank 0.
LATE_RANK = '''
import time
import torch
import horovod.torch as hvd
hvd.init()
if hvd.rank() == 1:
    time.sleep(8)
try:
    hvd.allreduce(torch.ones(4), name='late')
    print('rank {} no error'.format(hvd.rank()), flush=True)
except Exception as e:
    print('rank {} error: {}'.format(hvd.rank(), e), flush=True)
'''
STALL_WARNING = 'waiting for remainder of ranks for more than 2 seconds'


def test_stall_check_against_config_file(run, torch_adapter, tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('stall_check:\n  enabled: false\n  warning_time_seconds: 2\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith('HOROVOD_STALL')}
    # As the config file says: no check, rank 0 waits quietly for rank 1.
    r = run('-np', 2, '--config-file', config, PYTHON, '-c', LATE_RANK, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert STALL_WARNING not in r.stderr, r.stderr
    assert r.stdout.count('no error') == 2, r.stdout
    # --stall-check turns it back on: the coordinator reports the late rank.
    r = run('-np', 2, '--config-file', config, '--stall-check', PYTHON, '-c', LATE_RANK, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert STALL_WARNING in r.stderr and '1: [allreduce.late]' in r.stderr, r.stderr
    assert r.stdout.count('no error') == 2, r.stdout
