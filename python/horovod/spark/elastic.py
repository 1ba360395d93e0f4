"""``horovod.spark.run_elastic``: an elastic Horovod job whose workers run in Spark tasks.

The rounds are formed by horovodrun's elastic driver (bound from C++; horovod/runner/elastic_driver.py
runs it over a worker pool, for the elastic ``RayExecutor`` too); this module is its Spark side,
``SparkWorkerPool``:

* every worker is one task of a Spark job of its own (one partition, not a barrier stage), in a
  job group of its own, submitted from a driver thread. A barrier stage cannot replace a lost
  task, and one job for several workers would be aborted as a whole when one of its tasks
  fails; one job per worker lets a worker end, fail or be cancelled alone.
* The driver, not Spark's task retry, replaces lost workers: it decides the rounds and the
  worker ids, and a retried task would bring back an id the driver has written off. A retried
  attempt therefore returns at once without running anything (task.run_elastic_worker).
* Capacity is the cluster's task slots (``spark.default.parallelism / spark.task.cpus``) less
  the tasks of other jobs running now, less this job's live workers.
* A task tells the driver its host hash through the job's store, receives its environment when
  the driver places it in a round, and runs one Horovod process (task.py). Its Spark job ends
  when the process exits: the driver takes that as the worker's end (a result from the
  ``TaskService`` when the process exited 0).
"""

import json
import sys
import time

import cloudpickle

from horovod.runner.elastic_driver import ElasticDriver, WorkerPool, elastic_environment
from horovod.runner.error_text import describe
from horovod.spark.task import env_key, host_key, run_elastic_worker

__all__ = ['SparkWorkerPool', 'SparkElasticSpec', 'drive_elastic_job']

_POLL_SECONDS = 0.1
_CANCEL_WAIT_SECONDS = 30.0


class SparkElasticSpec:
    """What each elastic task needs from the driver (pickled into the task closure)."""

    def __init__(self, driver_addr, rendezvous_port, task_port, secret, executable, timestamps, placement_timeout_s):
        self.driver_addr = driver_addr
        self.rendezvous_port = rendezvous_port
        self.task_port = task_port
        self.secret = secret
        self.executable = executable
        self.timestamps = timestamps
        self.placement_timeout_s = placement_timeout_s


class _TaskJob:
    """The Spark job of one worker, collected in a thread of its own."""

    def __init__(self, context, group, spec, wid):
        from pyspark.util import InheritableThread
        self.context, self.group, self.spec, self.wid = context, group, spec, wid
        self.outcome = None
        self.error = None
        self.reported = False
        self.thread = InheritableThread(target=self._run, name='horovod-spark-worker-{}'.format(wid), daemon=True)
        self.thread.start()

    def _run(self):
        spec, wid = self.spec, self.wid
        try:
            self.context.setJobGroup(self.group, 'Horovod elastic worker {}'.format(wid), interruptOnCancel=True)
            rdd = self.context.parallelize([wid], 1)
            self.outcome = rdd.map(lambda w: run_elastic_worker(spec, w)).collect()[0]
        except BaseException as e:  # the task failed or was cancelled: reported by finished()
            self.error = e

    def done(self):
        return not self.thread.is_alive()

    def cancel(self, wait_s):
        """Cancels the job until its thread ends (at most ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        while self.thread.is_alive() and time.monotonic() < deadline:
            self.context.cancelJobGroup(self.group)
            self.thread.join(timeout=0.5)


class SparkWorkerPool(WorkerPool):
    where = 'in Spark task slots'
    min_name = 'min_num_proc'
    start_name = 'num_proc'
    capacity_hint = 'free task slots (add executors, or stop other jobs)'

    def __init__(self, context, group_prefix, spec, rendezvous, service, start_timeout):
        self.context = context
        self.group_prefix = group_prefix
        self.spec = spec
        self.rendezvous = rendezvous
        self.service = service
        self.start_timeout = start_timeout
        self.jobs = {}   # id -> _TaskJob

    def _group(self, wid):
        return '{}.worker{}'.format(self.group_prefix, wid)

    def slots(self):
        conf = self.context.getConf()
        return self.context.defaultParallelism // max(1, int(conf.get('spark.task.cpus', '1')))

    def capacity(self):
        tracker = self.context.statusTracker()
        ours = set()
        for job in self.jobs.values():
            if not job.done():
                for job_id in tracker.getJobIdsForGroup(job.group):
                    info = tracker.getJobInfo(job_id)
                    ours.update(info.stageIds if info else [])
        others = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if stage_id not in ours and info is not None:
                others += info.numActiveTasks
        live = sum(1 for job in self.jobs.values() if not job.done())
        return max(0, self.slots() - others - live)

    def launch(self, ids):
        for wid in ids:
            self.jobs[wid] = _TaskJob(self.context, self._group(wid), self.spec, wid)

    def locate(self, ids):
        from horovod.spark.runner import START_TIMEOUT_MESSAGE
        store = self.rendezvous.store
        deadline = time.monotonic() + self.start_timeout
        while True:
            hosts = {}
            for wid in ids:
                value = store.try_get(host_key(wid))
                if value is not None:
                    hosts[wid] = value.decode()
            if len(hosts) == len(ids):
                return {wid: (h, h) for wid, h in hosts.items()}
            ended = [wid for wid in ids if wid not in hosts and self.jobs[wid].done()]
            if ended:
                raise RuntimeError('The Spark task of elastic worker {} ended before it started: {}'.format(
                    ended[0], self._what_happened(self.jobs[ended[0]])))
            if time.monotonic() > deadline:
                for wid in ids:
                    if wid not in hosts:
                        self.jobs[wid].cancel(_CANCEL_WAIT_SECONDS)
                raise Exception(START_TIMEOUT_MESSAGE)
            time.sleep(_POLL_SECONDS)

    def start(self, wid, env):
        self.rendezvous.store.set(env_key(wid), json.dumps(env).encode())

    def finished(self, ranks):
        out = {}
        for wid, rank in ranks.items():
            job = self.jobs.get(wid)
            if job is None or job.reported or not job.done():
                continue
            job.reported = True
            outcome = job.outcome
            if job.error is None and outcome is not None and outcome.exit_code == 0:
                payload = self.service.results().get(rank)
                if payload is not None:
                    out[wid] = ('ok', cloudpickle.loads(payload))
                    continue
                out[wid] = ('failed', 'its process exited 0 but sent no result for rank {}'.format(rank))
                continue
            out[wid] = ('failed', self._what_happened(job))
        return out

    @staticmethod
    def _what_happened(job):
        if job.error is not None:
            return 'its Spark task failed: {}'.format(describe(job.error))
        outcome = job.outcome
        tail = outcome.stderr.strip().splitlines()[-1:] if outcome else []
        if outcome is None or outcome.exit_code is None:
            return tail[0] if tail else 'its task did not run the process'
        return 'its process exited with code {}{}'.format(outcome.exit_code, ': ' + tail[0] if tail else '')

    def kill(self, wid):
        self.context.cancelJobGroup(self._group(wid))

    def shutdown(self):
        deadline = time.monotonic() + _CANCEL_WAIT_SECONDS
        for job in self.jobs.values():
            job.cancel(max(0.0, deadline - time.monotonic()))

    def outcomes(self):
        """TaskOutcomes of the workers whose process ran, by worker id."""
        return [self.jobs[wid].outcome for wid in sorted(self.jobs)
                if self.jobs[wid].outcome is not None and self.jobs[wid].outcome.exit_code is not None]


def drive_elastic_job(context, group_prefix, spec, rendezvous, service, user_env, num_proc, min_num_proc,
                      max_num_proc, start_timeout, elastic_timeout, reset_limit, verbose):
    """Runs the job to its end; returns (results in the final round's rank order, outcomes of
    every process that ran), or raises RuntimeError. Cancels every task it started."""
    say = (lambda line: sys.stderr.write('horovod.spark.run_elastic: {}\n'.format(line))) if verbose >= 2 else None
    pool = SparkWorkerPool(context, group_prefix, spec, rendezvous, service, start_timeout)
    env = elastic_environment(elastic_timeout, user_env)
    driver = ElasticDriver(pool, rendezvous, spec.secret, spec.driver_addr, env, min_num_proc, max_num_proc,
                           reset_limit, elastic_timeout, start_workers=num_proc, say=say)
    try:
        results = driver.run()
    finally:
        pool.shutdown()
    return results, pool.outcomes(), driver.log

