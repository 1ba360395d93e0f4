"""``horovod.spark.run(use_mpi=True)``: the job's processes started by ``mpirun`` inside the Spark
tasks, as Horovod's MPI mode did.

Every barrier task registers its host with the driver, then waits for commands. The driver runs
``mpirun -H <one name per host>`` with ``horovod.spark.mpirun_rsh`` as its remote shell: where
mpirun would ssh to a host to start its daemon (Open MPI's orted, MPICH's hydra proxy), the
agent has the driver relay the command to the first task of that host, which runs it and
reports its exit status; the agent exits with it, as ssh would. The daemons start the ranks in
the Spark tasks' process trees; each rank (``python -m horovod.runner.run_task``) fetches the
function from the driver, runs it and sends its result back, as in the default mode. When
mpirun ends, the driver releases the tasks.

The host names given to mpirun are ``hvd-spark-<index>`` (the index of the host's first task):
only the agent reads them, so mpirun never mistakes the driver's host for a task's. Open MPI and
MPICH are supported (``mpirun --version`` tells them apart); ``extra_mpi_args`` go to mpirun.
"""

import collections
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import cloudpickle

OP_REGISTER, OP_POLL, OP_DONE, OP_EXEC, OP_WAIT = b'H', b'P', b'D', b'X', b'W'
_STOP = b'stop'
HOST_PREFIX = 'hvd-spark-'
DAEMON_GRACE_S = 10


class CommandRelay:
    """Driver side: tasks register (their host), agents submit commands for a host's task and
    wait for their exit status; tasks poll for commands and report. Served through the job's
    TaskService (``handlers()``)."""

    def __init__(self):
        self._lock = threading.Condition()
        self.hosts = {}      # task index -> host hash
        self._queued = {}    # task index -> [(command id, argv)]
        self._status = {}    # command id -> exit status
        self._stopping = False
        self._next = 0

    def handlers(self):
        return {OP_REGISTER: self._register, OP_POLL: self._poll, OP_DONE: self._done, OP_EXEC: self._exec,
                OP_WAIT: self._wait}

    def _register(self, index, payload):
        with self._lock:
            self.hosts[index] = payload.decode()
            self._lock.notify_all()
        return b'OK'

    def _poll(self, index, payload):
        with self._lock:
            self._lock.wait_for(lambda: self._stopping or self._queued.get(index), timeout=1.0)
            if self._queued.get(index):
                return cloudpickle.dumps(self._queued[index].pop(0))
            return _STOP if self._stopping else b''

    def _done(self, index, payload):
        command, status = json.loads(payload.decode())
        with self._lock:
            self._status[command] = status
            self._lock.notify_all()
        return b'OK'

    def _exec(self, index, payload):
        with self._lock:
            command, self._next = self._next, self._next + 1
            self._queued.setdefault(index, []).append((command, cloudpickle.loads(payload)))
            self._lock.notify_all()
        return str(command).encode()

    def _wait(self, index, payload):
        command = int(payload.decode())
        with self._lock:
            self._lock.wait_for(lambda: command in self._status, timeout=1.0)
            return str(self._status[command]).encode() if command in self._status else b''

    def failed(self):
        """Exit statuses of the relayed commands that failed."""
        with self._lock:
            return [status for status in self._status.values() if status != 0]

    def wait_for_hosts(self, count, timeout, alive):
        """{task index: host hash} once ``count`` tasks registered; TimeoutError after ``timeout``
        seconds or when ``alive()`` turns false."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.hosts) < count:
                if time.monotonic() > deadline or not alive():
                    raise TimeoutError()
                self._lock.wait(0.2)
            return dict(self.hosts)

    def stop(self):
        with self._lock:
            self._stopping = True
            self._lock.notify_all()


def serve_mpi_task(job):
    """In a barrier task: registers this task's host, then runs the commands the driver relays
    (an MPI daemon) until the driver says the job ended. Returns None."""
    from pyspark import BarrierTaskContext

    from horovod.runner.task_service import TaskClient
    from horovod.spark.task import die_with_parent, host_hash
    host = host_hash()
    index = BarrierTaskContext.get().partitionId()
    client = TaskClient(job.driver_addr, job.task_port, job.secret, index)
    client.request(OP_REGISTER, host.encode())
    env = dict(os.environ)
    env.update(job.env)
    while True:
        reply = client.request(OP_POLL)
        if reply == _STOP:
            return None
        if not reply:
            continue
        command, argv = cloudpickle.loads(reply)
        # The daemon dies with the task (a cancelled job kills the task's Python worker).
        status = subprocess.call(argv, env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        client.request(OP_DONE, json.dumps([command, status]).encode())


def mpi_command(mpirun, hosts, num_proc, job, extra_mpi_args, python, agent):
    """The mpirun argument vector: ``hosts`` is [(name, slots)], ``agent`` the remote shell
    (an executable: MPICH takes a path, not a command line)."""
    version = subprocess.run([mpirun, '--version'], capture_output=True, text=True).stdout
    host_list = ','.join('{}:{}'.format(name, slots) for name, slots in hosts)
    worker = [python, '-m', 'horovod.runner.run_task', job.driver_addr, str(job.task_port)]
    forwarded = sorted(job.env) + ['HOROVOD_SECRET_KEY', 'HOROVOD_SPARK_RSH', 'PYTHONPATH', 'PATH']
    if 'Open MPI' in version or 'OpenRTE' in version:
        argv = [mpirun, '--allow-run-as-root', '--oversubscribe', '-np', str(num_proc), '-H', host_list,
                '--mca', 'plm_rsh_agent', agent, '--mca', 'btl', '^openib']
        for name in forwarded:
            argv += ['-x', name]
        if job.timestamps:
            argv.append('--timestamp-output')
    elif 'HYDRA' in version or 'MPICH' in version:
        if job.timestamps:
            raise ValueError('horovod.spark.run(use_mpi=True): prefix_output_with_timestamp needs Open MPI '
                             '(MPICH\'s mpiexec cannot time-stamp output)')
        argv = [mpirun, '-np', str(num_proc), '-hosts', host_list, '-launcher', 'ssh', '-launcher-exec', agent,
                '-genvlist', ','.join(forwarded)]
    else:
        raise ValueError('horovod.spark.run(use_mpi=True): {} is neither Open MPI nor MPICH ({!r})'.format(
            mpirun, version.strip()[:200]))
    return argv + shlex.split(extra_mpi_args or '') + worker


def run_mpirun(relay, hosts_by_task, num_proc, job, extra_mpi_args, log):
    """Runs the job under mpirun; returns (exit status, stdout, stderr). A daemon that failed to start
    does not always end mpirun (MPICH's mpiexec waits on): mpirun is stopped DAEMON_GRACE_S
    after a relayed command failed."""
    mpirun = shutil.which('mpirun')
    if mpirun is None:
        raise ValueError('horovod.spark.run(use_mpi=True) needs mpirun on PATH (Open MPI or MPICH)')
    # Each host by its first task, with as many slots as it has tasks.
    first_task, slots = {}, collections.Counter(hosts_by_task.values())
    for index in sorted(hosts_by_task):
        first_task.setdefault(hosts_by_task[index], index)
    hosts = [('{}{}'.format(HOST_PREFIX, index), slots[host]) for host, index in first_task.items()]
    python = job.executable or sys.executable
    env = dict(os.environ)
    env.update(job.env)
    env['HOROVOD_SECRET_KEY'] = job.secret
    env['HOROVOD_SPARK_RSH'] = '{}:{}'.format(job.driver_addr, job.task_port)
    with tempfile.TemporaryDirectory(prefix='horovod_spark_mpi_') as folder:
        agent = os.path.join(folder, 'rsh')
        with open(agent, 'w') as f:
            f.write('#!/bin/sh\nexec {} -m horovod.spark.mpirun_rsh "$@"\n'.format(shlex.quote(python)))
        os.chmod(agent, 0o700)
        argv = mpi_command(mpirun, hosts, num_proc, job, extra_mpi_args, python, agent)
        log('running {}'.format(' '.join(shlex.quote(a) for a in argv)))
        with tempfile.TemporaryFile('w+') as output, tempfile.TemporaryFile('w+') as errors:
            child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=errors, text=True)
            failed_at = None
            while child.poll() is None:
                if failed_at is None and relay.failed():
                    failed_at = time.monotonic()
                if failed_at is not None and time.monotonic() - failed_at > DAEMON_GRACE_S:
                    log('an MPI daemon failed to start (exit status {}); stopping mpirun'.format(relay.failed()[0]))
                    child.kill()
                time.sleep(0.2)
            output.seek(0)
            errors.seek(0)
            out, err = output.read(), errors.read()
    if failed_at is not None:
        err += 'horovod.spark.run: an MPI daemon started through a Spark task exited with status {}\n'.format(
            relay.failed()[0])
    sys.stdout.write(out)
    sys.stderr.write(err)
    return child.returncode, out, err
