"""The static (fixed-size) Horovod job on Ray: actors in a placement group, their ranks and
environment, calls fanned out to every worker, and failures turned into errors naming the rank.

``RayExecutor`` (runner.py) drives one of these in the driver process, or inside an actor when
the driver is a Ray Client.
"""

import secrets
import time

import ray

from horovod.ray.placement import WorkerPlacement
from horovod.ray.worker import BaseHorovodWorker
from horovod.runner.error_text import describe
from horovod.runner.rendezvous import RendezvousServer
from horovod.runner.topology import assign_slots, slot_environment

__all__ = ['StaticJob', 'WorkerFailedError']

# How often the driver looks at the callback queue while it waits for the workers.
_POLL_SECONDS = 0.1


class WorkerFailedError(RuntimeError):
    """A worker's function raised, or its actor died. ``rank`` names it; the job's actors have
    been stopped (the others may be blocked in a collective with the failed rank)."""

    def __init__(self, rank, message):
        super().__init__(message)
        self.rank = rank


class StaticJob:
    """``num_workers`` Horovod processes as Ray actors, started by ``start()``.

    Contract: call start() once, then any of run/execute/execute_single/run_remote, then
    shutdown(). After a worker fails the job is shut down and later calls raise RuntimeError."""

    def __init__(self, settings, num_workers, num_hosts, workers_per_host, cpus_per_worker, use_gpu,
                 gpus_per_worker, use_current_placement_group):
        self.settings = settings
        self.num_workers = num_workers
        self.num_hosts = num_hosts
        self.workers_per_host = workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self.workers = []  # in rank order
        self.placement = None
        self.rendezvous = None
        self.failure = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        if self.workers:
            raise RuntimeError('RayExecutor.start() was already called; call shutdown() first')
        try:
            self._start(executable_cls, executable_args, executable_kwargs, extra_env_vars or {})
        except BaseException:
            self.shutdown()
            raise

    def _start(self, executable_cls, executable_args, executable_kwargs, extra_env_vars):
        self.failure = None
        self.placement = WorkerPlacement(self.num_workers, self.num_hosts, self.workers_per_host,
                                         self.cpus_per_worker, self.gpus_per_worker,
                                         self.use_current_placement_group, self.settings.placement_group_timeout_s)
        actor_cls = ray.remote(BaseHorovodWorker)
        actors = []
        for i in range(self.num_workers):
            options = dict(num_cpus=self.cpus_per_worker, scheduling_strategy=self.placement.strategy(i),
                           max_restarts=0, max_task_retries=0)
            if self.gpus_per_worker:
                options['num_gpus'] = self.gpus_per_worker
            actors.append(actor_cls.options(**options).remote(world_rank=i, world_size=self.num_workers))
        self.workers = actors  # so that shutdown() finds them if the next steps fail
        infos = self._get_all([a.node_info.remote() for a in actors], 'start', timeout_s=self._startup_timeout())
        # Hosts are Ray nodes; ranks go node by node (worker 0's node first), as horovodrun's do.
        slots = assign_slots([node_id for node_id, _, _, _ in infos])
        order = sorted(range(self.num_workers), key=lambda i: slots[i].rank)
        self.workers = [actors[i] for i in order]
        infos = [infos[i] for i in order]
        slots = [slots[i] for i in order]

        secret = secrets.token_hex(32)
        self.rendezvous = RendezvousServer(secret, '0.0.0.0')
        driver_addr = ray.util.get_node_ip_address()
        names = _host_names(infos)
        visible = _visible_gpus_by_node(infos)
        base = dict(self.settings.worker_environment())
        updates = []
        for worker, slot, info in zip(self.workers, slots, infos):
            env = dict(base)
            env.update(slot_environment(slot, names[info[0]], driver_addr, self.rendezvous.port, secret))
            if visible.get(info[0]):
                # Every worker of a node sees all of the node's job GPUs, so that local_rank indexes them.
                env['CUDA_VISIBLE_DEVICES'] = ','.join(visible[info[0]])
            env.update({k: str(v) for k, v in extra_env_vars.items()})
            updates.append(worker.update_env_vars.remote(env))
        self._get_all(updates, 'start', timeout_s=self._startup_timeout())
        self._get_all([w.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                       for w in self.workers], 'start')

    def _startup_timeout(self):
        # Actors start Python processes; on a busy node that takes seconds each.
        return max(self.settings.timeout_s, 60)

    def shutdown(self):
        """Kills the actors, releases the placement group and stops the rendezvous server.
        Idempotent."""
        for worker in self.workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # already dead
                pass
        self.workers = []
        if self.placement is not None:
            self.placement.release()
            self.placement = None
        if self.rendezvous is not None:
            self.rendezvous.shutdown()
            self.rendezvous = None

    # -- calls -----------------------------------------------------------------------------------

    # report_queue: a Ray queue that the caller created and drains itself (a Ray Client driver,
    # whose callbacks cannot run here); the workers put rank 0's reported values into it. (A
    # Queue has __len__: an empty one is falsy, so compare with None.)

    def run(self, fn, args=None, kwargs=None, callbacks=None, report_queue=None):
        queue = self._queue(callbacks) if report_queue is None else report_queue
        refs = [w.run.remote(fn, args, kwargs, queue) for w in self._live()]
        return self._get_all(refs, 'run', callbacks, queue if report_queue is None else None)

    def execute(self, fn, callbacks=None, report_queue=None):
        queue = self._queue(callbacks) if report_queue is None else report_queue
        refs = [w.execute.remote(fn, queue) for w in self._live()]
        return self._get_all(refs, 'execute', callbacks, queue if report_queue is None else None)

    def execute_single(self, fn):
        return self._get_all([self._live()[0].execute.remote(fn)], 'execute_single')[0]

    def run_remote(self, fn, args=None, kwargs=None):
        return [w.run.remote(fn, args, kwargs) for w in self._live()]

    def _live(self):
        if self.failure is not None:
            raise RuntimeError('This RayExecutor was shut down after a worker failed ({}); call start() again'.format(
                self.failure))
        if not self.workers:
            raise RuntimeError('RayExecutor has no workers: call start() first')
        return self.workers

    @staticmethod
    def _queue(callbacks):
        if not callbacks:
            return None
        from ray.util.queue import Queue
        return Queue(actor_options={'num_cpus': 0})

    def _get_all(self, refs, what, callbacks=None, queue=None, timeout_s=None):
        """Results of ``refs`` (one per rank, in rank order). The first failure stops every
        worker and raises WorkerFailedError naming its rank; ``timeout_s`` bounds the wait."""
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=_POLL_SECONDS if queue is not None else 1.0)
                for ref in ready:
                    self._check(ref, rank_of[ref], what)
                _drain(queue, callbacks)
                if deadline is not None and time.monotonic() > deadline and pending:
                    ranks = sorted(rank_of[r] for r in pending)
                    self._fail(ranks[0], 'Horovod workers (ranks {}) did not answer {} within {:.0f} s'.format(
                        ranks, what, timeout_s))
            _drain(queue, callbacks)
        finally:
            if queue is not None:
                queue.shutdown()
        return ray.get(list(refs))

    def _check(self, ref, rank, what):
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self._fail(rank, 'Horovod worker rank {} died during {}: its Ray actor is gone ({}). The other '
                             'workers were stopped.'.format(rank, what, describe(e)), e)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if getattr(e, 'cause', None) is not None else e
            self._fail(rank, 'Horovod worker rank {} raised {}: {}. The other workers were stopped.'.format(
                rank, type(cause).__name__, describe(cause)), cause)

    def _fail(self, rank, message, cause=None):
        self.failure = message
        self.shutdown()
        raise WorkerFailedError(rank, message) from cause


def _drain(queue, callbacks):
    if queue is None:
        return
    while not queue.empty():
        value = queue.get()
        for callback in callbacks:
            callback(value)


def _host_names(infos):
    """HOROVOD_HOSTNAME per node id: the node's IP, made unique when nodes share one."""
    ips = {}
    for node_id, ip, _, _ in infos:
        ips.setdefault(ip, set()).add(node_id)
    return {node_id: ip if len(ips[ip]) == 1 else '{}-{}'.format(ip, node_id[:8]) for node_id, ip, _, _ in infos}


def _visible_gpus_by_node(infos):
    """Per node id, the union of the GPU ids Ray gave its workers, in worker order."""
    visible = {}
    for node_id, _, _, gpus in infos:
        ids = visible.setdefault(node_id, [])
        ids.extend(g for g in gpus if g not in ids)
    return visible
