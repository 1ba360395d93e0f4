"""The elastic Horovod job on Ray (``RayExecutor(min_workers=...)``): actors that train inside
``hvd.elastic.run`` and survive the loss of some of them.

The rounds are formed by horovodrun's elastic driver (bound from C++; horovod/runner/elastic_driver.py
runs it over a worker pool, for ``horovod.spark.run_elastic`` too); this module is its Ray side,
``RayWorkerPool``:

* a worker is a ``BaseHorovodWorker`` actor (``cpus_per_worker``, GPUs with ``use_gpu``) that
  builds ``executable_cls`` (start()) and runs the job's function: ``run(fn)`` calls
  ``fn(*args, **kwargs)``, ``execute(fn)`` calls ``fn(executable)``, once it joined a round;
* by default it goes wherever Ray has room, and the pool's capacity is what
  ``ray.available_resources()`` fits. With ``cooldown_range`` or a host discovery
  (``override_discovery=False``) each new actor is pinned to a node chosen by nodes.py: nodes
  the driver blacklisted sit out their cooldown, and discovery bounds each node's workers;
* its host is its Ray node; a worker whose actor dies or whose function raises is gone (the
  driver blacklists its node when there is a cooldown range, horovodrun's rule); a straggler is
  killed with ``ray.kill``;
* what rank 0 passes to ``horovod.ray.report`` reaches ``callbacks`` on the driver, through a
  Ray queue drained while the driver polls.
"""

import secrets

import ray

from horovod import _core
from horovod.ray.nodes import NodeRoom
from horovod.ray.static import _drain, _host_names
from horovod.ray.worker import BaseHorovodWorker
from horovod.runner.elastic_driver import ElasticDriver, WorkerPool, elastic_environment
from horovod.runner.error_text import describe
from horovod.runner.rendezvous import RendezvousServer

__all__ = ['ElasticJob', 'RayWorkerPool']

class RayWorkerPool(WorkerPool):
    """Elastic workers as Ray actors. ``call``: (worker method, its arguments), what each runs:
    ``('run', (fn, args, kwargs))`` or ``('execute', (fn,))``. ``executable``: (cls, args,
    kwargs) each actor builds first, or None. ``queue`` and ``callbacks``: rank 0's reports and
    who gets them. ``blacklist`` (a ``horovod._core.ElasticBlacklist`` with a cooldown range,
    which the driver fills) and ``discovery``: see nodes.py (None: none)."""

    where = 'on Ray'
    min_name = 'min_workers'
    capacity_hint = 'free Ray resources'

    def __init__(self, cpus_per_worker, gpus_per_worker, startup_timeout_s, call, executable=None, queue=None,
                 callbacks=None, blacklist=None, discovery=None):
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.startup_timeout_s = startup_timeout_s
        self.call = call
        self.executable = executable
        self.queue = queue
        self.callbacks = callbacks or []
        self.node_room = None
        if blacklist is not None or discovery is not None:
            self.node_room = NodeRoom(cpus_per_worker, gpus_per_worker,
                                      lambda node_id: blacklist is not None and blacklist.blacklisted(str(node_id)),
                                      discovery)
            limits = (['not cooling down'] if blacklist is not None else []) + (
                ['named by the host discovery'] if discovery is not None else [])
            self.capacity_hint = 'free Ray resources on nodes {}'.format(' and '.join(limits))
        self.actors = {}     # id -> actor handle
        self.refs = {}       # id -> ObjectRef of its running function
        self.infos = {}      # id -> node_info() of its actor
        self.nodes = {}      # id -> node id of each live worker

    def _running_per_node(self):
        running = {}
        for node_id in self.nodes.values():
            running[node_id] = running.get(node_id, 0) + 1
        return running

    def capacity(self):
        self.drain()
        if self.node_room is not None:
            return sum(self.node_room.per_node(self._running_per_node()).values())
        free = ray.available_resources()
        n = int(free.get('CPU', 0) // self.cpus_per_worker)
        if self.gpus_per_worker:
            n = min(n, int(free.get('GPU', 0) // self.gpus_per_worker))
        return n

    def launch(self, ids):
        options = dict(num_cpus=self.cpus_per_worker, max_restarts=0, max_task_retries=0)
        if self.gpus_per_worker:
            options['num_gpus'] = self.gpus_per_worker
        targets = [None] * len(ids)
        if self.node_room is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            chosen = NodeRoom.choose(self.node_room.per_node(self._running_per_node()), len(ids))
            targets = chosen + [None] * (len(ids) - len(chosen))
        for wid, node_id in zip(ids, targets):
            if node_id is not None:
                options['scheduling_strategy'] = NodeAffinitySchedulingStrategy(node_id, soft=False)
                self.nodes[wid] = node_id
            elif self.node_room is not None:
                # The room went between capacity() and now (another job took it): Ray places
                # this actor where it can, or locate() times out naming what it needs.
                options['scheduling_strategy'] = 'DEFAULT'
            self.actors[wid] = ray.remote(BaseHorovodWorker).options(**options).remote()

    def locate(self, ids):
        try:
            infos = ray.get([self.actors[i].node_info.remote() for i in ids], timeout=self.startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError('{} new Horovod workers were not placed on Ray within {} s (need {} CPUs{} each on '
                               'a usable node)'.format(len(ids), self.startup_timeout_s, self.cpus_per_worker,
                                                       ' and {} GPUs'.format(self.gpus_per_worker)
                                                       if self.gpus_per_worker else '')) from None
        self.infos.update(zip(ids, infos))
        for i in ids:
            self.nodes[i] = self.infos[i][0]
        names = _host_names(list(self.infos.values()))
        return {i: (self.infos[i][0], names[self.infos[i][0]]) for i in ids}

    def start(self, wid, env):
        actor = self.actors[wid]
        ray.get(actor.update_env_vars.remote(env), timeout=self.startup_timeout_s)
        if self.executable is not None:
            cls, args, kwargs = self.executable
            ray.get(actor.start_executable.remote(cls, args, kwargs), timeout=self.startup_timeout_s)
        method, args = self.call
        self.refs[wid] = getattr(actor, method).remote(*args, queue=self.queue)

    def drain(self):
        """Hands rank 0's reports so far to the callbacks (on the driver's thread)."""
        if self.queue is not None and self.callbacks:
            _drain(self.queue, self.callbacks)

    def finished(self, ranks):
        self.drain()
        refs = {self.refs[i]: i for i in ranks if i in self.refs}
        if not refs:
            return {}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        out = {}
        for ref in done:
            wid = refs[ref]
            del self.refs[wid]
            try:
                out[wid] = ('ok', ray.get(ref))
            except ray.exceptions.RayActorError as e:
                out[wid] = ('failed', 'its Ray actor died ({})'.format(describe(e)))
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if getattr(e, 'cause', None) is not None else e
                out[wid] = ('failed', 'it raised {}: {}'.format(type(cause).__name__, describe(cause)))
            if out[wid][0] == 'failed':
                self.nodes.pop(wid, None)
        return out

    def kill(self, wid):
        self.nodes.pop(wid, None)
        try:
            ray.kill(self.actors[wid], no_restart=True)
        except Exception:  # already dead
            pass

    def shutdown(self):
        for wid in list(self.actors):
            self.kill(wid)
        self.actors, self.refs = {}, {}


class ElasticJob:
    """The executor's elastic job: ``start()`` opens the rendezvous server, ``run(fn)`` /
    ``execute(fn)`` drive rounds of actors to the end (results in the final round's rank order),
    ``shutdown()`` kills every actor. ``cooldown_range``: see nodes.py; ``discovery``: a
    HostDiscovery that names the nodes and their slots (None: Ray's resources decide).
    ``log``: (time, what) lines of the driver, for callers and tests."""

    def __init__(self, settings, min_workers, max_workers, cpus_per_worker, use_gpu, gpus_per_worker,
                 reset_limit, elastic_timeout, gather_timeout=None, cooldown_range=None, discovery=None):
        self.settings = settings
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.reset_limit = reset_limit
        self.elastic_timeout = elastic_timeout
        self.gather_timeout = gather_timeout
        # Kept across run() calls, as the nodes are; filled by the driver (None: no cooldown range).
        self.blacklist = _core.ElasticBlacklist(tuple(cooldown_range)) if cooldown_range is not None else None
        self.discovery = discovery
        self.rendezvous = None
        self.secret = None
        self.env = {}
        self.executable = None
        self.pool = None
        self.next_id = 0
        self.log = []

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Opens the rendezvous; each worker of every round builds
        ``executable_cls(*executable_args, **executable_kwargs)`` (for ``execute``) before it runs."""
        self.secret = secrets.token_hex(32)
        self.rendezvous = RendezvousServer(self.secret, '0.0.0.0')
        if executable_cls is not None:
            self.executable = (executable_cls, list(executable_args or []), dict(executable_kwargs or {}))
        env = dict(self.settings.worker_environment())
        env.update({k: str(v) for k, v in (extra_env_vars or {}).items()})
        self.env = elastic_environment(self.elastic_timeout, env)

    def shutdown(self):
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        if self.rendezvous is not None:
            self.rendezvous.shutdown()
            self.rendezvous = None

    def run(self, fn, args=None, kwargs=None, callbacks=None, report_queue=None):
        return self._drive(('run', (fn, args, kwargs)), callbacks, report_queue)

    def execute(self, fn, callbacks=None, report_queue=None):
        return self._drive(('execute', (fn,)), callbacks, report_queue)

    def _drive(self, call, callbacks, report_queue):
        """Runs ``call`` on rounds of workers to the end. Rank 0's reports go to ``callbacks``
        here, or into ``report_queue`` (Ray Client: the caller drains it)."""
        if self.rendezvous is None:
            raise RuntimeError('RayExecutor has no workers: call start() first')
        queue = report_queue
        own_queue = None
        if queue is None and callbacks:
            from ray.util.queue import Queue
            queue = own_queue = Queue(actor_options={'num_cpus': 0})
        self.pool = RayWorkerPool(self.cpus_per_worker, self.gpus_per_worker, max(60, self.settings.timeout_s), call,
                                  executable=self.executable, queue=queue,
                                  callbacks=callbacks if own_queue is not None else None,
                                  blacklist=self.blacklist, discovery=self.discovery)
        driver = ElasticDriver(self.pool, self.rendezvous, self.secret, ray.util.get_node_ip_address(), self.env,
                               self.min_workers, self.max_workers, self.reset_limit, self.elastic_timeout,
                               self.gather_timeout, log=self.log, first_id=self.next_id,
                               blacklist=self.blacklist)
        try:
            results = driver.run()
            self.pool.drain()  # a worker's put() returns before its function does
            return results
        finally:
            self.next_id = driver.next_id
            # The workers are done: free their resources now, for the next run's first round
            # (which takes what is free when it forms) and for other jobs.
            self.pool.shutdown()
            self.pool = None
            if own_queue is not None:
                own_queue.shutdown()

    def execute_single(self, fn):
        raise NotImplementedError('elastic RayExecutor: execute_single needs a fixed rank 0; use execute(fn), '
                                  'whose results are in the final round\'s rank order')

    def run_remote(self, fn, args=None, kwargs=None):
        raise NotImplementedError('elastic RayExecutor: run_remote needs a fixed set of workers; use run(fn)')
