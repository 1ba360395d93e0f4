"""What runs inside each Spark barrier task of ``horovod.spark.run``: agree on ranks with the
other tasks (host hashes through ``BarrierTaskContext.allGather``), then start this task's
Horovod process (``python -m horovod.runner.run_task``, which fetches the function from the
driver and sends the result back) and wait for it. And what runs in each task of
``horovod.spark.run_elastic`` (``run_elastic_worker``).

Also ``get_available_devices()``, as in Horovod's horovod.spark.task.
"""

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ['host_hash', 'get_available_devices', 'TaskOutcome', 'run_horovod_process', 'run_elastic_worker']

# Bytes of each process's output kept for the driver (the end of it).
_KEEP_OUTPUT_BYTES = 1 << 20

# exit_time: the process's exit (wall clock of its host), so that the driver can tell the
# process that failed first from those that failed because it did (lost their peer).
TaskOutcome = collections.namedtuple('TaskOutcome', 'rank exit_code stdout stderr exit_time')


def host_hash():
    """This machine's identity for local ranks: the host name plus the network namespace, so
    that tasks in distinct containers or namespaces of one machine count as distinct hosts."""
    try:
        namespace = os.stat('/proc/self/ns/net').st_ino
    except OSError:
        namespace = 0
    return '{}-{:x}'.format(socket.gethostname(), namespace)


def get_available_devices():
    """GPU addresses Spark assigned to this task ([] without GPU scheduling or outside a task)."""
    from pyspark import TaskContext
    context = TaskContext.get()
    if context is None:
        return []
    gpus = context.resources().get('gpu')
    return list(gpus.addresses) if gpus is not None else []


def die_with_parent():
    """In the child before exec: receive SIGKILL when the task's Python worker dies (a cancelled
    Spark task), so that no Horovod process outlives its task."""
    try:
        import ctypes
        libc = ctypes.CDLL('libc.so.6', use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        pass


class _Pump(threading.Thread):
    """Copies a child's stream line by line to ``sink`` (with Horovod's ``[rank]<stdout>:`` tag)
    and keeps the last ``_KEEP_OUTPUT_BYTES`` for the driver."""

    def __init__(self, source, sink, tag, timestamps):
        super().__init__(daemon=True)
        self.source, self.sink, self.tag, self.timestamps = source, sink, tag, timestamps
        self.kept = collections.deque()
        self.kept_bytes = 0

    def run(self):
        for raw in iter(self.source.readline, b''):
            # As horovodrun: "[rank]<stdout>:line", with time.asctime() in front if asked.
            line = (time.asctime() if self.timestamps else '') + self.tag + raw.decode('utf-8', errors='replace')
            try:
                self.sink.write(line)
                self.sink.flush()
            except (OSError, ValueError):
                pass
            self.kept.append(line)
            self.kept_bytes += len(line)
            while self.kept_bytes > _KEEP_OUTPUT_BYTES and len(self.kept) > 1:
                self.kept_bytes -= len(self.kept.popleft())

    def text(self):
        return ''.join(self.kept)


def _run_process(job, env, rank):
    """Runs this task's Horovod process (``python -m horovod.runner.run_task``, which fetches the
    function from the driver and sends the result back) with ``env``, its output pumped to the
    executor's streams tagged with ``rank``. Returns its TaskOutcome. As in Horovod,
    ``HOROVOD_SPARK_WORK_DIR`` is the process's working directory and ``HOROVOD_SPARK_PYTHONPATH``
    goes before its PYTHONPATH (both from ``env``, e.g. ``horovod.spark.run(env=...)``)."""
    env = dict(env)
    env['PYTHONUNBUFFERED'] = '1'
    if env.get('HOROVOD_SPARK_PYTHONPATH'):
        env['PYTHONPATH'] = os.pathsep.join(p for p in (env['HOROVOD_SPARK_PYTHONPATH'], env.get('PYTHONPATH')) if p)
    command = [job.executable or sys.executable, '-m', 'horovod.runner.run_task', job.driver_addr,
               str(job.task_port)]
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, preexec_fn=die_with_parent,
                             cwd=env.get('HOROVOD_SPARK_WORK_DIR') or None)
    pumps = [_Pump(child.stdout, sys.stdout, '[{}]<stdout>:'.format(rank), job.timestamps),
             _Pump(child.stderr, sys.stderr, '[{}]<stderr>:'.format(rank), job.timestamps)]
    for pump in pumps:
        pump.start()
    code = child.wait()
    exit_time = time.time()
    for pump in pumps:
        pump.join()
    return TaskOutcome(rank, code, pumps[0].text(), pumps[1].text(), exit_time)


def run_horovod_process(job):
    """Runs in a barrier task: returns its TaskOutcome. ``job`` is the driver's SparkJobSpec."""
    from pyspark import BarrierTaskContext

    from horovod.runner.task_service import TaskClient
    from horovod.runner.topology import assign_slots, slot_environment

    context = BarrierTaskContext.get()
    index = context.partitionId()
    hosts = context.allGather(host_hash())
    slot = assign_slots(hosts)[index]
    env = dict(os.environ)
    env.update(job.env)
    env.update(slot_environment(slot, hosts[index], job.driver_addr, job.rendezvous_port, job.secret))
    outcome = _run_process(job, env, slot.rank)
    if outcome.exit_code != 0:
        # Tell the driver at once, so that it cancels the other tasks (they may wait for us in a
        # collective) instead of waiting for Spark to notice.
        import cloudpickle
        try:
            TaskClient(job.driver_addr, job.task_port, job.secret, slot.rank).send_result(
                cloudpickle.dumps(outcome))
        except OSError:
            pass
    return outcome


def host_key(worker_id):
    return 'spark/host/{}'.format(worker_id)


def env_key(worker_id):
    return 'spark/env/{}'.format(worker_id)


def run_elastic_worker(job, worker_id):
    """Runs in a (non-barrier) task of ``horovod.spark.run_elastic``: one elastic worker.

    Writes this task's host hash to the job's store (``spark/host/<id>``), waits for the
    environment the driver gives it when it places the worker in a round (``spark/env/<id>``,
    JSON), then runs the Horovod process. Returns its TaskOutcome; exit_code None when the
    process never ran (a retried attempt: the driver replaces lost workers itself, and a second
    process with the same worker id would break the rendezvous)."""
    import json

    from pyspark import TaskContext

    from horovod.runner.rendezvous import StoreClient, StoreTimeout

    context = TaskContext.get()
    if context is not None and context.attemptNumber() > 0:
        return TaskOutcome(None, None, '', 'Spark retried the task of elastic worker {} (attempt {}); the retry did '
                           'not run it: the driver starts replacements itself\n'.format(
                               worker_id, context.attemptNumber()), time.time())
    try:
        with StoreClient(job.driver_addr, job.rendezvous_port, job.secret) as store:
            store.set(host_key(worker_id), host_hash().encode())
            worker_env = json.loads(store.get(env_key(worker_id), job.placement_timeout_s).decode())
    except (OSError, StoreTimeout) as e:
        return TaskOutcome(None, None, '', 'elastic worker {} was not placed in a round: {}\n'.format(worker_id, e),
                           time.time())
    env = dict(os.environ)
    env.update(worker_env)
    return _run_process(job, env, worker_env['HOROVOD_RANK'])
