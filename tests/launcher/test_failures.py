"""Worker failures and signals: Horovod's messages, exit status 1, the other workers terminated
within the grace period, and no process left behind."""

import os
import signal
import subprocess
import time

import pytest

from launcher_util import kill_leftovers, pgrep, wait_until

FIRST_FAILURE = ('Horovod detected that one or more processes exited with non-zero status, thus causing the job to '
                 'be terminated. The first process to do so was:\nProcess name: {rank}\nExit code: {code}\n')


@pytest.fixture
def sleepers(marker):
    """Pattern of this test's sleeping workers; anything left is killed and fails the test."""
    pattern = 'sleep ' + marker
    yield pattern
    left = pgrep(pattern)
    kill_leftovers(pattern)
    assert not left, 'workers left behind: {}'.format(left)


def test_worker_exit_code_fails_job(run, sleepers):
    script = ('import os, sys, time\n'
              'if os.environ["HOROVOD_RANK"] == "1":\n'
              '    time.sleep(0.3); print("rank 1 fails", flush=True); os._exit(3)\n'
              'os.execvp("sleep", ["sleep", "{}"])\n').format(sleepers.split()[1])
    r = run('--verbose', '-np', 3, 'python3', '-c', script)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert '[1]<stdout>:rank 1 fails' in lines
    failure = lines.index('Process 1 exit with status code 3.')
    assert lines.index('[1]<stdout>:rank 1 fails') < failure  # the worker's last words come first
    assert 'Process 1 ran on host localhost and exited with status 3.' in lines
    assert 'Terminating remaining workers after failure of Process 1.' in lines
    assert r.stderr.endswith(FIRST_FAILURE.format(rank=1, code=3))
    # The sleeping workers went at the SIGTERM sent on the failure, not at the SIGKILL that ends
    # the grace period (events, not elapsed time: a loaded machine cannot fail this).
    for rank in (0, 2):
        assert 'horovodrun: process {} on localhost ended with signal 15 (SIGTERM)'.format(rank) in r.stderr, r.stderr
    assert 'signal 9 (SIGKILL)' not in r.stderr, r.stderr


def test_worker_killed_by_signal(run, sleepers):
    r = run('-np', 2, 'sh', '-c', 'if [ $HOROVOD_RANK = 0 ]; then kill -9 $$; fi; exec {}'.format(sleepers))
    assert r.returncode == 1
    assert 'Process 0 exit with status code 137.' in r.stdout
    assert 'Process 0 ran on host localhost and was killed by signal 9 (SIGKILL).' in r.stdout
    assert 'Terminating remaining workers after failure of Process 0.' in r.stdout
    assert r.stderr.endswith(FIRST_FAILURE.format(rank=0, code=137))


def test_worker_ignoring_sigterm_is_killed_after_grace(run, sleepers):
    script = 'if [ $HOROVOD_RANK = 0 ]; then sleep 0.3; exit 1; fi; trap "" TERM; {}; true'.format(sleepers)
    start = time.monotonic()
    r = run('--verbose', '-np', 2, 'sh', '-c', script)
    elapsed = time.monotonic() - start
    assert r.returncode == 1
    assert 'Process 0 exit with status code 1.' in r.stdout
    # SIGTERM ignored; SIGKILL once the 5 s grace ended (never sooner; later only on a busy machine).
    assert 'horovodrun: process 1 on localhost ended with signal 9 (SIGKILL)' in r.stderr, r.stderr
    assert elapsed > 4.5, elapsed


def test_grandchildren_are_terminated(run, sleepers):
    # A worker that started a background process: the whole process group goes.
    script = 'if [ $HOROVOD_RANK = 0 ]; then sleep 0.3; exit 2; fi; {} & wait'.format(sleepers)
    r = run('-np', 2, 'sh', '-c', script)
    assert r.returncode == 1
    assert wait_until(lambda: not pgrep(sleepers), 3)


def test_all_workers_succeed(run):
    r = run('-np', 4, 'true')
    assert r.returncode == 0
    assert r.stdout == '' and r.stderr == ''


def test_first_failure_is_reported_once(run):
    r = run('-np', 3, 'sh', '-c', 'exit 5')
    assert r.returncode == 1
    assert r.stdout.count('exit with status code 5.') == 1
    assert r.stderr.count('Horovod detected') == 1


@pytest.mark.parametrize('sig,code', [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_to_launcher_stops_every_worker(hvdrun, sleepers, sig, code):
    proc = subprocess.Popen([hvdrun, '--verbose', '-np', '3', 'sh', '-c', '{} & {}; wait'.format(sleepers, sleepers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: len(pgrep(sleepers)) >= 6, 30), 'workers did not start'
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == code
        # The workers honour SIGTERM: each went at the launcher's SIGTERM, none needed the SIGKILL
        # that ends the grace period.
        for rank in range(3):
            assert 'horovodrun: process {} on localhost ended with signal 15 (SIGTERM)'.format(rank) in err, err
        assert 'signal 9 (SIGKILL)' not in err, err
        assert wait_until(lambda: not pgrep(sleepers), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_second_signal_kills_at_once(hvdrun, sleepers):
    proc = subprocess.Popen([hvdrun, '-np', '2', 'sh', '-c', 'trap "" TERM; {}; true'.format(sleepers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: len(pgrep(sleepers)) >= 2, 10)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        assert time.monotonic() - start < 3
        assert proc.returncode == 130
        assert wait_until(lambda: not pgrep(sleepers), 3)
    finally:
        proc.kill()
        proc.communicate()


def test_sigkill_of_launcher_leaves_no_worker(hvdrun, sleepers):
    proc = subprocess.Popen([hvdrun, '-np', '3', 'sh', '-c', '{} & {}; wait'.format(sleepers, sleepers)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: len(pgrep(sleepers)) >= 6, 10)
        proc.kill()
        proc.wait(timeout=5)
        # The orphan guard terminates every worker process group (SIGTERM, SIGKILL after 2 s).
        assert wait_until(lambda: not pgrep(sleepers), 5)
    finally:
        proc.kill()


def test_exit_status_of_command_not_executable(run, tmp_path):
    script = tmp_path / 'not_executable.sh'
    script.write_text('#!/bin/sh\necho hi\n')
    r = run('-np', 1, script)
    assert r.returncode == 2
    assert 'cannot run {0}: {0} is not executable'.format(script) in r.stderr, r.stderr
    assert 'command not found' not in r.stderr, r.stderr
    # Found on PATH but not executable: named with its full path.
    r = run('-np', 1, 'not_executable.sh', extra_env={'PATH': '{}:{}'.format(tmp_path, os.environ['PATH'])})
    assert r.returncode == 2
    assert '{} is not executable'.format(script) in r.stderr and '(found on PATH)' in r.stderr, r.stderr
    r = run('-np', 1, tmp_path)
    assert r.returncode == 2 and 'cannot run {0}: {0} is a directory'.format(tmp_path) in r.stderr, r.stderr
    r = run('-np', 1, tmp_path / 'missing.sh')
    assert r.returncode == 2
    assert 'command not found: {0} ({0}: no such file)'.format(tmp_path / 'missing.sh') in r.stderr, r.stderr
