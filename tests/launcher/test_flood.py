"""Connection floods on every listening socket of a job, during the job.

The hammer (two processes opening connections as fast as they can, each reset at once, plus 150
idle holders each: build/bench/flood_hammer, the C++ one, when it is built beside horovodrun, else
bench/flood_hammer.py) floods a listener from before the job starts until after the process
serving it exited. Per listener the test checks the events: the job finishes with every rank
done, the serving process exits while the flood still runs (shutdown is not held up by it), and
its open file descriptors (sampled from /proc/PID/fd) stay bounded. Throughput and memory
under a flood are measured by bench/flood.py, not asserted here.

Listeners: horovodrun's rendezvous server in a static and in an elastic job (the elastic driver
serves its protocol through it; Ray and Spark drivers run the same server), and the task service
of horovod.run() (which Spark drivers run too). Each rank's own TCP-mesh listener is covered by
the C++ test IdleConnectionsDoNotStallSetup.
"""

import os
import socket
import subprocess
import sys
import threading

import pytest

from launcher_util import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(HERE, 'flood', 'train.py')
RUN_API_DRIVER = os.path.join(HERE, 'flood', 'run_api_driver.py')
HAMMER_PY = os.path.join(ROOT, 'bench', 'flood_hammer.py')
# The rendezvous server holds at most 256 handshakes, the task service 64 (and as many dropped
# ones whose thread is ending); the rest is the job's own connections, pipes and files. The flood
# holds 300 idle connections, more than either bound.
FD_BOUND = {'rendezvous': 256 + 64, 'task service': 2 * 64 + 64}

pytest.importorskip('torch')
pytest.importorskip('horovod.torch')


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def hammer_command(hvdrun):
    """The C++ hammer of horovodrun's build tree (build/launcher/horovodrun -> build/bench/), else
    the Python one."""
    built = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(hvdrun))), 'bench', 'flood_hammer')
    return [built] if os.access(built, os.X_OK) else [sys.executable, HAMMER_PY]


class Flood:
    """The hammer against 127.0.0.1:port until stop(); started() once it runs."""

    def __init__(self, hvdrun, port, tmp_path):
        self.stop_file = str(tmp_path / 'flood.stop')
        self.started_file = str(tmp_path / 'flood.started')
        self.proc = subprocess.Popen(hammer_command(hvdrun) + [
            '127.0.0.1', str(port), '--seconds', '300', '--procs', '2', '--holders', '150', '--stop-file',
            self.stop_file, '--started-file', self.started_file], stdout=subprocess.PIPE, text=True)

    def wait_started(self):
        assert wait_until(lambda: os.path.exists(self.started_file + '.0') or self.proc.poll() is not None, 60)
        assert self.proc.poll() is None, 'the flood did not start'

    def stop(self):
        open(self.stop_file, 'w').close()
        out, _ = self.proc.communicate(timeout=60)
        return out


class FdWatch(threading.Thread):
    """The largest number of open descriptors of `pid` seen until the process ends."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.start()

    def run(self):
        while True:
            try:
                self.peak = max(self.peak, len(os.listdir('/proc/{}/fd'.format(self.pid))))
            except OSError:
                return
            threading.Event().wait(0.02)


def run_under_flood(hvdrun, command, port, tmp_path, env, listener):
    """Runs `command` (which serves `port`) under a flood that is aimed at the port before the
    job starts; the job's ranks train until the flood is on (the file `go`), then a few steps more.
    Returns its output and the flood's statistics."""
    flood = Flood(hvdrun, port, tmp_path)
    try:
        job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        fds = FdWatch(job.pid)
        try:
            flood.wait_started()
            (tmp_path / 'go').write_text('')
            out, _ = job.communicate(timeout=240)
        finally:
            if job.poll() is None:
                job.kill()
        out = out.decode('utf-8', errors='replace')
        flood_still_on = flood.proc.poll() is None
    finally:
        stats = flood.stop()
    assert job.returncode == 0, out[-4000:]
    assert flood_still_on, 'the flood ended before the job: ' + stats
    fds.join(timeout=10)
    assert 0 < fds.peak <= FD_BOUND[listener], (fds.peak, stats)
    return out, stats


def flood_env(tmp_path, port):
    env = dict(os.environ, FLOOD_DIR=str(tmp_path), FLOOD_STEPS='100', HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
               PYTHONUNBUFFERED='1')
    env.pop('HOROVOD_LOG_LEVEL', None)
    return env


def assert_ranks_done(tmp_path, size):
    for r in range(size):
        assert (tmp_path / 'done{}'.format(r)).exists(), 'rank {} did not finish'.format(r)


@pytest.mark.parametrize('kind', ['static', 'elastic'])
def test_job_finishes_and_horovodrun_exits_during_a_rendezvous_flood(hvdrun, tmp_path, kind):
    port = free_port()
    args = [hvdrun, '-np', '2']
    if kind == 'elastic':
        script = tmp_path / 'discover.sh'
        script.write_text('#!/bin/sh\necho localhost:2\n')
        script.chmod(0o755)
        args += ['--min-np', '2', '--host-discovery-script', str(script)]
    out, stats = run_under_flood(hvdrun, args + [sys.executable, TRAIN], port, tmp_path, flood_env(tmp_path, port),
                                 'rendezvous')
    assert_ranks_done(tmp_path, 2)
    assert 'refused authentication' not in out, out[-4000:]
    print(stats)


def test_horovod_run_finishes_during_a_task_service_flood(hvdrun, tmp_path):
    # The driver prints its task service's port and waits for `go` (the flood is then on) before
    # it starts the job: the workers fetch the function and send their results through the flood.
    env = flood_env(tmp_path, free_port())
    env['HOROVOD_RUN_BINARY'] = hvdrun
    driver = subprocess.Popen([sys.executable, RUN_API_DRIVER, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        port = int(driver.stdout.readline().split()[-1])
        flood = Flood(hvdrun, port, tmp_path)
        try:
            flood.wait_started()
            fds = FdWatch(driver.pid)
            (tmp_path / 'go').write_text('')
            out, _ = driver.communicate(timeout=240)
            flood_still_on = flood.proc.poll() is None
        finally:
            stats = flood.stop()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out[-4000:]
    assert 'results: [2, 2]' in out, out[-4000:]
    assert flood_still_on, 'the flood ended before the driver: ' + stats
    fds.join(timeout=10)
    assert 0 < fds.peak <= FD_BOUND['task service'], (fds.peak, stats)
    print(stats)
