"""The elastic Horovod job on Ray (``RayExecutor(min_workers=...)``): actors that train inside
``hvd.elastic.run`` and survive the loss of some of them.

The rounds are formed by the shared elastic driver (horovod/runner/elastic_driver.py, which
``horovod.spark.run_elastic`` uses too); this module is its Ray side, ``RayWorkerPool``:

* a worker is a ``BaseHorovodWorker`` actor (``cpus_per_worker``, GPUs with ``use_gpu``),
  placed wherever Ray has room; the pool's capacity is what ``ray.available_resources()`` fits;
* its host is its Ray node; ``run(fn)`` starts ``fn`` on it once it has joined a round;
* a worker whose actor dies or whose ``fn`` raises is gone; a straggler is killed with
  ``ray.kill``. Ray owns node health: a lost actor is not held against its node (no blacklist).
"""

import secrets

import ray

from horovod.ray.static import _host_names
from horovod.ray.worker import BaseHorovodWorker
from horovod.runner.elastic_driver import ElasticDriver, WorkerPool, elastic_environment
from horovod.runner.error_text import describe
from horovod.runner.rendezvous import RendezvousServer

__all__ = ['ElasticJob', 'RayWorkerPool']

class RayWorkerPool(WorkerPool):
    """Elastic workers as Ray actors; ``fn(*args, **kwargs)`` is what each runs."""

    where = 'on Ray'
    min_name = 'min_workers'
    capacity_hint = 'free Ray resources'

    def __init__(self, cpus_per_worker, gpus_per_worker, startup_timeout_s, fn, args, kwargs):
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.startup_timeout_s = startup_timeout_s
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.actors = {}     # id -> actor handle
        self.refs = {}       # id -> ObjectRef of its running fn
        self.infos = {}      # id -> node_info() of its actor

    def capacity(self):
        free = ray.available_resources()
        n = int(free.get('CPU', 0) // self.cpus_per_worker)
        if self.gpus_per_worker:
            n = min(n, int(free.get('GPU', 0) // self.gpus_per_worker))
        return n

    def launch(self, ids):
        options = dict(num_cpus=self.cpus_per_worker, max_restarts=0, max_task_retries=0)
        if self.gpus_per_worker:
            options['num_gpus'] = self.gpus_per_worker
        for wid in ids:
            self.actors[wid] = ray.remote(BaseHorovodWorker).options(**options).remote()

    def locate(self, ids):
        infos = ray.get([self.actors[i].node_info.remote() for i in ids], timeout=self.startup_timeout_s)
        self.infos.update(zip(ids, infos))
        names = _host_names(list(self.infos.values()))
        return {i: (self.infos[i][0], names[self.infos[i][0]]) for i in ids}

    def start(self, wid, env):
        actor = self.actors[wid]
        ray.get(actor.update_env_vars.remote(env), timeout=self.startup_timeout_s)
        self.refs[wid] = actor.run.remote(self.fn, self.args, self.kwargs)

    def finished(self, ranks):
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
        return out

    def kill(self, wid):
        try:
            ray.kill(self.actors[wid], no_restart=True)
        except Exception:  # already dead
            pass

    def shutdown(self):
        for wid in list(self.actors):
            self.kill(wid)
        self.actors, self.refs = {}, {}


class ElasticJob:
    """The executor's elastic job: ``start()`` opens the rendezvous server, ``run(fn)`` drives
    rounds of actors to the end (results in the final round's rank order), ``shutdown()``
    kills every actor. ``log``: (time, what) lines of the driver, for callers and tests."""

    def __init__(self, settings, min_workers, max_workers, cpus_per_worker, use_gpu, gpus_per_worker,
                 reset_limit, elastic_timeout, gather_timeout=None):
        self.settings = settings
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.reset_limit = reset_limit
        self.elastic_timeout = elastic_timeout
        self.gather_timeout = gather_timeout
        self.rendezvous = None
        self.secret = None
        self.env = {}
        self.pool = None
        self.next_id = 0
        self.log = []

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        if executable_cls is not None:
            raise NotImplementedError('elastic RayExecutor: start() takes no executable_cls; train in run(fn)')
        self.secret = secrets.token_hex(32)
        self.rendezvous = RendezvousServer(self.secret, '0.0.0.0')
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

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        if callbacks:
            raise NotImplementedError('elastic RayExecutor.run: callbacks are not supported')
        if self.rendezvous is None:
            raise RuntimeError('RayExecutor has no workers: call start() first')
        if self.pool is not None:
            self.pool.shutdown()
        self.pool = RayWorkerPool(self.cpus_per_worker, self.gpus_per_worker, max(60, self.settings.timeout_s),
                                  fn, args, kwargs)
        driver = ElasticDriver(self.pool, self.rendezvous, self.secret, ray.util.get_node_ip_address(), self.env,
                               self.min_workers, self.max_workers, self.reset_limit, self.elastic_timeout,
                               self.gather_timeout, log=self.log, first_id=self.next_id)
        try:
            return driver.run()
        finally:
            self.next_id = driver.next_id

    def execute(self, fn, callbacks=None):
        raise NotImplementedError('elastic RayExecutor: use run(fn); execute needs a fixed set of workers')

    def execute_single(self, fn):
        raise NotImplementedError('elastic RayExecutor: use run(fn)')

    def run_remote(self, fn, args=None, kwargs=None):
        raise NotImplementedError('elastic RayExecutor: use run(fn)')
