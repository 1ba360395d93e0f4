"""Bad input: a one-line error naming the problem, exit status 2, and no worker started."""

import socket

import pytest


@pytest.fixture
def canary(tmp_path):
    """A command that leaves a file behind if any worker ever ran."""
    path = tmp_path / 'worker-ran'
    return ['sh', '-c', 'touch {}'.format(path)], path


def assert_usage_error(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith('horovodrun: error: '), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert r.stdout == ''


CASES = [
    (['--no-such-flag', '-np', '1'], ['unrecognized arguments: --no-such-flag']),
    (['-np', '5', '-H', 'localhost:2,127.0.0.1:2'],
     ['Requested more processes (5) than there are available slots (4)']),
    (['-np', '3'] + ['-H', 'localhost'],
     ['Invalid host input, please make sure it has format as : worker-0:2,worker-1:2.']),
    (['-np', '2', '-H', 'a:1,b:x'], ['Invalid host input']),
    (['-np', '2', '-H', 'bad host:2'], ['Invalid host input']),
    (['-np', 'four'], ["argument -np/--num-proc: invalid int value: 'four'"]),
    ([], ['the following arguments are required: -np/--num-proc']),
    (['-np', '0'], ['-np/--num-proc']),
    (['-np', '1', '--fusion-threshold-mb', '-1'], ['fusion_threshold_mb=-1 must be >= 0']),
    (['-np', '1', '--cycle-time-ms', '-0.5'], ['cycle_time_ms=-0.5 must be >= 0']),
    (['-np', '1', '--autotune-gaussian-process-noise', '1.5'], ['autotune_gaussian_process_noise']),
    (['-np', '1', '--log-level', 'LOUD'], ["invalid choice: 'LOUD'"]),
    (['-np', '1', '--blacklist-cooldown-range', '0', '10'], ['--blacklist-cooldown-range']),
    (['-np', '1', '-H', 'localhost:1', '--hostfile', '/dev/null'], ['not allowed with argument -H/--hosts']),
    (['-np', '1', '--gloo', '--mpi'], ['argument --mpi: not allowed with argument --gloo']),
    (['-np', '1', '--jsrun'], ['LSF']),
    (['-np', '1', '--network-interface', 'nosuchnic0'], ['nosuchnic0']),
    (['-np', '1', '--hostfile', '/nonexistent/hostfile'], ['/nonexistent/hostfile']),
    (['-np', '1', '--config-file', '/nonexistent/config.yaml'], ['/nonexistent/config.yaml']),
    (['-np', '1', '--start-timeout', 'soon'], ["invalid float value: 'soon'"]),
]


@pytest.mark.parametrize('args,fragments', CASES, ids=[' '.join(c[0]) or 'no-args' for c in CASES])
def test_usage_errors(run, canary, args, fragments):
    command, ran = canary
    r = run(*(args + command))
    assert_usage_error(r, *fragments)
    assert not ran.exists()


def test_missing_command(run):
    assert_usage_error(run('-np', '2'), 'the following arguments are required: command')


def test_missing_executable(run):
    assert_usage_error(run('-np', '2', 'no-such-program-xyz', '--flag'), 'command not found: no-such-program-xyz')


def test_missing_executable_path(run, tmp_path):
    assert_usage_error(run('-np', '1', str(tmp_path / 'nothing')), 'command not found', str(tmp_path / 'nothing'))


def test_bad_hostfile_line_names_line(run, tmp_path, canary):
    command, ran = canary
    hostfile = tmp_path / 'hosts'
    hostfile.write_text('localhost slots=2\n\n127.0.0.1 slots=two\n')
    r = run('-np', '2', '--hostfile', hostfile, *command)
    assert_usage_error(r, '{}:3:'.format(hostfile), "invalid slot count 'two'")
    assert not ran.exists()


def test_hostfile_junk(run, tmp_path, canary):
    command, ran = canary
    hostfile = tmp_path / 'hosts'
    hostfile.write_text('localhost slots=2 gpus=4\n')
    assert_usage_error(run('-np', '2', '--hostfile', hostfile, *command), '{}:1:'.format(hostfile), 'gpus=4')


def test_port_in_use(run, canary):
    command, ran = canary
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run('-np', '2', *command, extra_env={'HOROVOD_GLOO_RENDEZVOUS_PORT': str(port)})
    assert_usage_error(r, 'cannot start the rendezvous server on 127.0.0.1:{}'.format(port))
    assert not ran.exists()


def test_fixed_rendezvous_port_is_used(run):
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    r = run('-np', '1', 'sh', '-c', 'echo $HOROVOD_GLOO_RENDEZVOUS_PORT',
            extra_env={'HOROVOD_GLOO_RENDEZVOUS_PORT': str(port)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == '[0]<stdout>:{}\n'.format(port)


def test_bad_config_file_line_number(run, tmp_path, canary):
    command, ran = canary
    config = tmp_path / 'config.yaml'
    config.write_text('params:\n  fusion_threshold_mb: 32\n   cycle_time_ms: 5\n')
    assert_usage_error(run('-np', '1', '--config-file', config, *command), '{}:3:'.format(config), 'indentation')
    assert not ran.exists()
