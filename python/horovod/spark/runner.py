"""``horovod.spark.run``: a Horovod job whose processes run in the tasks of a Spark barrier stage.

The driver (this module) serves the function and collects the results (``TaskService``, as
``horovod.run`` does) and runs the job's rendezvous server; each of the ``num_proc`` barrier
tasks starts one Horovod process (task.py). A failing process is reported by its task at once;
the driver then cancels the job group, so no task is left waiting in a collective.
"""

import collections
import itertools
import os
import secrets
import signal
import sys
import time

import cloudpickle

from horovod.runner.rendezvous import RendezvousServer
from horovod.runner.task_service import TaskService
from horovod.spark.mpi_run import CommandRelay, run_mpirun, serve_mpi_task
from horovod.spark.task import TaskOutcome, run_horovod_process

__all__ = ['run', 'run_elastic']

NO_CONTEXT_MESSAGE = 'Could not find an active SparkContext, are you running in a PySpark session?'
START_TIMEOUT_MESSAGE = (
    'Timed out waiting for Spark tasks to start. Please check that you have enough resources to run all '
    'Horovod processes. Each Horovod process runs in a Spark task. You may need to increase the '
    'start_timeout parameter to a larger value if your Spark resources are allocated on-demand.')

# What each task needs from the driver (pickled into the task closure).
SparkJobSpec = collections.namedtuple(
    'SparkJobSpec', 'driver_addr rendezvous_port task_port secret env executable timestamps')

_job_counter = itertools.count()
_POLL_SECONDS = 0.2
# After the first failure report, how long to wait for the others before choosing the first.
_FAILURE_GRACE_SECONDS = 1.0


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None):
    """Runs ``fn(*args, **kwargs)`` in ``num_proc`` Horovod processes, one per Spark task of a
    barrier stage on the active SparkContext; returns the return values in rank order.

    num_proc: default ``spark.default.parallelism``; more than the cluster's task slots is a
        ValueError (a barrier stage needs all its tasks at once).
    start_timeout: seconds for all tasks to start (default $HOROVOD_SPARK_START_TIMEOUT or 600).
    use_gloo: the built-in controller (the default). use_mpi: the processes are started by
        ``mpirun`` (Open MPI or MPICH on PATH, on the driver and the executors) inside the Spark
        tasks (mpi_run.py); extra_mpi_args: more mpirun arguments (needs use_mpi).
    env: variables added to each process's environment (on top of the executor's).
    stdout, stderr: streams that receive every process's output, tagged ``[rank]<stdout>:``,
        when the job ends; the output also goes live to the executors' stdout/stderr.
    verbose: 2 and more logs the driver's steps to stderr.
    nics: network interfaces for Horovod's TCP connections (the first is used).
    executable: the Python interpreter of the Horovod processes (default: the executor's).

    Raises Exception(NO_CONTEXT_MESSAGE) without an active SparkContext, and RuntimeError when a
    process fails (Horovod's message naming its rank and exit code, with its stderr)."""
    from pyspark import SparkContext
    from pyspark.util import InheritableThread

    if use_mpi and use_gloo:
        raise ValueError('Argument use_gloo and use_mpi only allow one set True.')
    if extra_mpi_args and not use_mpi:
        raise ValueError('horovod.spark.run: extra_mpi_args are mpirun arguments; they need use_mpi=True')
    context = SparkContext._active_spark_context
    if context is None:
        raise Exception(NO_CONTEXT_MESSAGE)
    if start_timeout is None:
        start_timeout = float(os.environ.get('HOROVOD_SPARK_START_TIMEOUT', '600'))
    if num_proc is None:
        num_proc = context.defaultParallelism
    if num_proc < 1:
        raise ValueError('num_proc must be at least 1, got {}'.format(num_proc))
    _check_slots(context, num_proc)
    if isinstance(nics, str):
        nics = [nics]

    def log(message):
        if verbose >= 2:
            sys.stderr.write('horovod.spark.run: {}\n'.format(message))

    relay = CommandRelay() if use_mpi else None
    secret, worker_env, driver_addr, rendezvous, service = _job_services(
        context, env, nics, fn, args, kwargs, handlers=relay.handlers() if relay else None)
    spec = SparkJobSpec(driver_addr, rendezvous.port, service.port, secret, worker_env, executable,
                        prefix_output_with_timestamp)
    group = 'horovod.spark.run.{}.{}'.format(os.getpid(), next(_job_counter))
    log('job group {}: {} processes, rendezvous {}:{}'.format(group, num_proc, driver_addr, rendezvous.port))
    if use_mpi:
        try:
            return _run_mpi(context, group, num_proc, spec, relay, service, start_timeout, extra_mpi_args,
                            stdout, stderr, log)
        finally:
            service.shutdown()
            rendezvous.shutdown()
    stage = _Stage(context, group, num_proc, spec)
    try:
        thread = InheritableThread(target=stage.run, name='horovod-spark-job', daemon=True)
        thread.start()
        try:
            outcomes = _supervise(context, group, num_proc, start_timeout, thread, stage, service, log)
        except KeyboardInterrupt:
            _cancel(context, group, thread, stage, wait_s=5)  # do not leave the processes running
            raise
    finally:
        service.shutdown()
        rendezvous.shutdown()
    _write_output(outcomes, stdout, stderr)
    return outcomes['results']


class _Stage:
    """The barrier stage, collected in a thread of its own (the driver watches meanwhile). Each
    task runs ``task_fn(spec)`` (default: one Horovod process)."""

    def __init__(self, context, group, num_proc, spec, task_fn=run_horovod_process):
        self.context, self.group, self.num_proc, self.spec = context, group, num_proc, spec
        self.task_fn = task_fn
        self.outcomes = None
        self.error = None
        self.cancelled = False

    def run(self):
        spec, task_fn = self.spec, self.task_fn
        try:
            if self.cancelled:
                return
            self.context.setJobGroup(self.group, 'Horovod job ({} processes)'.format(self.num_proc),
                                     interruptOnCancel=True)
            rdd = self.context.parallelize(range(self.num_proc), self.num_proc)
            self.outcomes = rdd.barrier().mapPartitions(lambda _: [task_fn(spec)]).collect()
        except BaseException as e:  # surfaced by _supervise
            self.error = e


def _run_mpi(context, group, num_proc, spec, relay, service, start_timeout, extra_mpi_args, stdout, stderr, log):
    """use_mpi=True: the tasks wait for commands (mpi_run.serve_mpi_task) while the driver runs
    mpirun through them; returns the results in rank order."""
    from pyspark.util import InheritableThread
    stage = _Stage(context, group, num_proc, spec, task_fn=serve_mpi_task)
    thread = InheritableThread(target=stage.run, name='horovod-spark-job', daemon=True)
    thread.start()
    try:
        try:
            hosts = relay.wait_for_hosts(num_proc, start_timeout, thread.is_alive)
        except TimeoutError:
            if stage.error is not None:
                raise RuntimeError('The Spark job of the Horovod processes failed: {}'.format(stage.error))
            raise Exception(START_TIMEOUT_MESSAGE)
        log('all {} tasks started on {} host(s)'.format(num_proc, len(set(hosts.values()))))
        code, out, err = run_mpirun(relay, hosts, num_proc, spec, extra_mpi_args, log)
        if stdout is not None:
            stdout.write(out)
        if stderr is not None:
            stderr.write(err)
    except BaseException:
        relay.stop()
        _cancel(context, group, thread, stage, wait_s=10)
        raise
    relay.stop()
    thread.join(timeout=30)
    if thread.is_alive():  # a daemon outlived mpirun: end its task
        _cancel(context, group, thread, stage, wait_s=10)
    if code != 0:
        tail = '\n'.join((out + err).strip().splitlines()[-20:])
        raise RuntimeError('mpirun exited with non-zero status {} (horovod.spark.run with use_mpi=True). Its last '
                           'lines of output:\n{}'.format(code, tail))
    return _results_in_rank_order(service, num_proc)


def _job_services(context, env, nics, fn, args, kwargs, handlers=None):
    """What every Spark job of ours starts with: a fresh secret, the workers' environment, the
    driver's address, and the job's rendezvous server and task service (which ships the function
    and collects results). The caller shuts both servers down."""
    secret = secrets.token_hex(32)
    worker_env = {k: str(v) for k, v in (env or {}).items()}
    worker_env.pop('CUDA_VISIBLE_DEVICES', None)
    if nics:
        worker_env['HOROVOD_GLOO_IFACE'] = list(nics)[0]
    driver_addr = context.getConf().get('spark.driver.host')
    rendezvous = RendezvousServer(secret, '0.0.0.0')
    service = TaskService(secret, cloudpickle.dumps((fn, args, kwargs)), handlers=handlers)
    return secret, worker_env, driver_addr, rendezvous, service


def _supervise(context, group, num_proc, start_timeout, thread, stage, service, log):
    """Waits for the stage; on the first failing process cancels the job group and raises.
    Returns {'results': [...], 'outcomes': [TaskOutcome...]}."""
    started_by = time.monotonic() + start_timeout
    started = False
    while True:
        failure = _first_failure(service, grace_s=_FAILURE_GRACE_SECONDS)
        if failure is not None:
            log('rank {} exited with {}; cancelling job group {}'.format(failure.rank, failure.exit_code, group))
            _cancel(context, group, thread, stage)
            raise RuntimeError(_failure_message(failure))
        if not thread.is_alive():
            break
        if not started:
            started = _all_tasks_started(context, group, num_proc)
            if started:
                log('all {} tasks started'.format(num_proc))
            elif time.monotonic() > started_by:
                _cancel(context, group, thread, stage)
                raise Exception(START_TIMEOUT_MESSAGE)
        thread.join(timeout=_POLL_SECONDS)
    if stage.error is not None:
        failure = _first_failure(service)
        if failure is not None:
            raise RuntimeError(_failure_message(failure)) from stage.error
        raise RuntimeError('The Spark job of the Horovod processes failed: {}'.format(stage.error)) from stage.error
    outcomes = sorted(stage.outcomes, key=lambda o: o.rank)
    failed = [o for o in outcomes if o.exit_code != 0]
    if failed:
        raise RuntimeError(_failure_message(min(failed, key=lambda o: o.exit_time)))
    return {'results': _results_in_rank_order(service, num_proc), 'outcomes': outcomes}


def _results_in_rank_order(service, num_proc):
    """Every rank's returned value, unpickled, in rank order; RuntimeError naming missing ranks."""
    payloads = service.results()
    missing = [r for r in range(num_proc) if r not in payloads]
    if missing:
        raise RuntimeError('Horovod job finished but ranks {} returned no result'.format(missing))
    return [cloudpickle.loads(payloads[r]) for r in range(num_proc)]


def _cancel(context, group, thread, stage, wait_s=60):
    """Cancels the job group until the stage's thread ends (at most ``wait_s``): a job submitted
    just after a cancellation would otherwise run on."""
    stage.cancelled = True
    deadline = time.monotonic() + wait_s
    while True:
        context.cancelJobGroup(group)
        thread.join(timeout=0.5)
        if not thread.is_alive() or time.monotonic() > deadline:
            return


def _first_failure(service, grace_s=0.0):
    """The process that failed first (earliest exit), or None. With ``grace_s``, once one has
    failed, waits that long for the reports of the others: a rank that loses its peer fails a
    moment later and may report sooner."""
    failures = _failures(service)
    if failures and grace_s > 0:
        time.sleep(grace_s)
        failures = _failures(service)
    return min(failures, key=lambda o: o.exit_time) if failures else None


def _failures(service):
    values = [cloudpickle.loads(payload) for payload in service.results().values()]
    return [v for v in values if isinstance(v, TaskOutcome) and v.exit_code != 0]


def _exit_code_text(code):
    """A process's exit code as horovodrun prints it: a process killed by a signal exited with
    128 + the signal's number (subprocess reports it negative), and the signal is named."""
    if code >= 0:
        return str(code)
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = 'signal {}'.format(-code)
    return '{} (killed by {})'.format(128 - code, name)


def _failure_message(outcome):
    message = ('Horovod detected that one or more processes exited with non-zero status, thus causing the job '
               'to be terminated. The first process to do so was:\nProcess name: {}\nExit code: {}\n'.format(
                   outcome.rank, _exit_code_text(outcome.exit_code)))
    tail = outcome.stderr.strip().splitlines()[-20:]
    if tail:
        message += 'Its last lines of stderr:\n' + '\n'.join(tail) + '\n'
    return message


def _all_tasks_started(context, group, num_proc):
    tracker = context.statusTracker()
    running = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in (job.stageIds if job else []):
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                running += info.numActiveTasks + info.numCompletedTasks
    return running >= num_proc


def _check_slots(context, num_proc):
    """A barrier stage needs every task at once: more tasks than slots would only fail after
    Spark's retries (minutes), so say so now. Skipped under dynamic allocation."""
    conf = context.getConf()
    if conf.get('spark.dynamicAllocation.enabled', 'false').lower() == 'true':
        return
    cpus_per_task = int(conf.get('spark.task.cpus', '1'))
    slots = context.defaultParallelism // max(1, cpus_per_task)
    if num_proc > slots:
        raise ValueError('num_proc={} is more than the {} task slots of this Spark cluster (spark.default.parallelism '
                         '{} / spark.task.cpus {}): a barrier stage runs all its tasks at once. Use num_proc <= {} or '
                         'add executors.'.format(num_proc, slots, context.defaultParallelism, cpus_per_task, slots))


def _write_output(outcomes, stdout, stderr):
    for outcome in outcomes['outcomes']:
        if stdout is not None and outcome.stdout:
            stdout.write(outcome.stdout)
        if stderr is not None and outcome.stderr:
            stderr.write(outcome.stderr)


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """Runs ``fn(*args, **kwargs)`` as an elastic Horovod job in tasks of the active SparkContext
    (one non-barrier task per worker; elastic.py); returns the return values of the final
    round's workers in rank order. ``fn`` trains inside ``hvd.elastic.run``: when a worker's
    process or task dies, the others roll back to their last commit and go on with a replacement.

    num_proc: workers needed to start (default ``spark.default.parallelism``).
    min_num_proc (alias min_np): fewer workers possible after a failure: wait up to
        ``elastic_timeout`` for slots, then RuntimeError. Default num_proc.
    max_num_proc (alias max_np): at most this many workers. Default num_proc.
    start_timeout: seconds for a worker's task to start (default $HOROVOD_SPARK_START_TIMEOUT or 600).
    elastic_timeout: seconds to wait for enough slots (default $HOROVOD_ELASTIC_TIMEOUT or 600).
    reset_limit: the job fails on the reset after this many (default unlimited).
    env, stdout, stderr, verbose, nics, prefix_output_with_timestamp: as in ``run``.

    Raises Exception(NO_CONTEXT_MESSAGE) without an active SparkContext."""
    from pyspark import SparkContext

    from horovod.spark.elastic import SparkElasticSpec, drive_elastic_job

    context = SparkContext._active_spark_context
    if context is None:
        raise Exception(NO_CONTEXT_MESSAGE)
    min_num_proc = _alias(min_num_proc, min_np, 'min_num_proc', 'min_np')
    max_num_proc = _alias(max_num_proc, max_np, 'max_num_proc', 'max_np')
    if num_proc is None:
        num_proc = context.defaultParallelism
    min_num_proc = num_proc if min_num_proc is None else min_num_proc
    max_num_proc = num_proc if max_num_proc is None else max_num_proc
    if min_num_proc < 1:
        raise ValueError('min_num_proc must be at least 1, got {}'.format(min_num_proc))
    if not min_num_proc <= num_proc <= max_num_proc:
        raise ValueError('run_elastic needs min_num_proc <= num_proc <= max_num_proc, got {} <= {} <= {}'.format(
            min_num_proc, num_proc, max_num_proc))
    if reset_limit is not None and reset_limit < 0:
        raise ValueError('reset_limit must not be negative, got {}'.format(reset_limit))
    if start_timeout is None:
        start_timeout = float(os.environ.get('HOROVOD_SPARK_START_TIMEOUT', '600'))
    if elastic_timeout is None:
        elastic_timeout = float(os.environ.get('HOROVOD_ELASTIC_TIMEOUT', '600'))
    if isinstance(nics, str):
        nics = [nics]

    secret, worker_env, driver_addr, rendezvous, service = _job_services(context, env, nics, fn, args, kwargs)
    # A placed task waits for its round this long; the driver cancels it sooner when it gives up.
    spec = SparkElasticSpec(driver_addr, rendezvous.port, service.port, secret, None, prefix_output_with_timestamp,
                            start_timeout + 2 * elastic_timeout + 60)
    group = 'horovod.spark.run_elastic.{}.{}'.format(os.getpid(), next(_job_counter))
    try:
        results, outcomes, _ = drive_elastic_job(context, group, spec, rendezvous, service, worker_env, num_proc,
                                                 min_num_proc, max_num_proc, start_timeout, elastic_timeout,
                                                 reset_limit, verbose)
    finally:
        service.shutdown()
        rendezvous.shutdown()
    _write_output({'outcomes': outcomes}, stdout, stderr)
    return results


def _alias(value, alias, name, alias_name):
    if alias is not None and value is not None and alias != value:
        raise ValueError('{} and its alias {} differ ({} and {}); give one'.format(name, alias_name, value, alias))
    return value if value is not None else alias
