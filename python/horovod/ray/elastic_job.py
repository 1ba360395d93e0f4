"""The elastic Horovod job on Ray (``RayExecutor(min_workers=...)``): actors that train inside
``hvd.elastic.run`` and survive the loss of some of them.

The driver side of the elastic rendezvous (the protocol horovodrun's elastic driver speaks, see
docs/elastic.md): each worker process has an id; each of its ``init()`` calls bumps
``elastic/inits/<id>`` and ``elastic/events`` in the job's rendezvous store and waits for
``elastic/assign/<id>/<k>``. This driver answers from the store's own process:

* ``run(fn)`` starts ``fn`` on every worker (``fn`` calls ``hvd.init()`` and trains inside
  ``hvd.elastic.run``). A worker whose actor dies or whose ``fn`` raises is gone; the others
  see ``HorovodInternalError``, roll back and call ``init()`` again.
* When every live worker of the round has asked again (or the gather timeout passed: the rest
  are killed), a new round forms: survivors first (in their old rank order, so rank 0 holds the
  state to broadcast), then new actors for free capacity up to ``max_workers``; each new actor
  runs ``fn`` too. Fewer than ``min_workers`` possible: wait up to ``elastic_timeout``.
* Ray owns node health: a lost actor is not held against its node (no blacklist); a new actor
  goes wherever Ray places it.
* ``run`` returns the final round's results in rank order once its workers return; the job
  fails with RuntimeError after ``reset_limit`` resets, when no worker survives a round, or when
  ``min_workers`` cannot be reached in time.
"""

import secrets
import time

import ray

from horovod.ray.static import _first_line, _host_names
from horovod.ray.worker import BaseHorovodWorker
from horovod.runner.rendezvous_server import RendezvousServer
from horovod.runner.topology import assign_slots, slot_environment

__all__ = ['ElasticJob']

_POLL_SECONDS = 0.05
_GATHER_TIMEOUT_SECONDS = 10.0


class _Worker:
    def __init__(self, wid, actor):
        self.id = wid
        self.actor = actor
        self.ref = None          # the running fn's ObjectRef
        self.published = 0       # assignments written
        self.rank = None         # in the latest round it joined
        self.node = None
        self.info = None         # node_info() of its actor
        self.alive = True
        self.retired = False     # removed, told to stop, or killed as a straggler

    def waiting(self, inits):
        return self.alive and not self.retired and inits > self.published


class ElasticJob:
    def __init__(self, settings, min_workers, max_workers, cpus_per_worker, use_gpu, gpus_per_worker,
                 reset_limit, elastic_timeout, gather_timeout=_GATHER_TIMEOUT_SECONDS):
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
        self.workers = {}        # id -> _Worker
        self.members = []        # ids of the latest round, in rank order
        self.round = -1
        self.resets = 0
        self.next_id = 0
        self.env = {}
        self.log = []            # (time, what) for the caller and the tests

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        if executable_cls is not None:
            raise NotImplementedError('elastic RayExecutor: start() takes no executable_cls; train in run(fn)')
        self.secret = secrets.token_hex(32)
        self.rendezvous = RendezvousServer(self.secret, '0.0.0.0')
        self.env = dict(self.settings.worker_environment())
        self.env.update({k: str(v) for k, v in (extra_env_vars or {}).items()})
        self.env.update({'HOROVOD_ELASTIC': '1', 'HOROVOD_ELASTIC_TIMEOUT': str(float(self.elastic_timeout))})

    def shutdown(self):
        for w in self.workers.values():
            try:
                ray.kill(w.actor, no_restart=True)
            except Exception:  # already dead
                pass
        self.workers = {}
        self.members = []
        if self.rendezvous is not None:
            self.rendezvous.shutdown()
            self.rendezvous = None

    # -- the store -------------------------------------------------------------------------------

    def _counter(self, key):
        store = self.rendezvous.store
        with store.cond:
            return int(store.data.get(key.encode(), b'0').decode('ascii'))

    def _publish(self, w, text):
        store = self.rendezvous.store
        with store.cond:
            store.data['elastic/assign/{}/{}'.format(w.id, w.published).encode()] = text.encode()
            store.cond.notify_all()
        w.published += 1

    def _inits(self, w):
        return self._counter('elastic/inits/{}'.format(w.id))

    # -- rounds ----------------------------------------------------------------------------------

    def _capacity(self):
        """How many more actors Ray can place now."""
        free = ray.available_resources()
        n = int(free.get('CPU', 0) // self.cpus_per_worker)
        if self.gpus_per_worker:
            n = min(n, int(free.get('GPU', 0) // self.gpus_per_worker))
        return n

    def _new_actor(self):
        options = dict(num_cpus=self.cpus_per_worker, max_restarts=0, max_task_retries=0)
        if self.gpus_per_worker:
            options['num_gpus'] = self.gpus_per_worker
        wid = self.next_id
        self.next_id += 1
        w = _Worker(wid, ray.remote(BaseHorovodWorker).options(**options).remote())
        self.workers[wid] = w
        return w

    def _form_round(self, survivors, fn, args, kwargs):
        """Places survivors (ids, old rank order) and new actors; publishes; starts fn on the new."""
        deadline = time.monotonic() + self.elastic_timeout
        while True:
            room = (self.max_workers or 1 << 30) - len(survivors)
            new_count = max(0, min(room, self._capacity()))
            if len(survivors) + new_count >= self.min_workers:
                break
            if time.monotonic() > deadline:
                raise RuntimeError('Timed out after {:.1f} s waiting for {} Horovod workers on Ray ({} possible): '
                                   'free Ray resources or lower min_workers'.format(
                                       self.elastic_timeout, self.min_workers, len(survivors) + new_count))
            time.sleep(0.5)
        if self.round >= 0 and not survivors:
            raise RuntimeError('No hosts from previous set remaining, unable to broadcast state.')
        fresh = [self._new_actor() for _ in range(new_count)]
        # Survivors are busy in fn (an actor runs one call at a time): their node is remembered.
        fresh_infos = ray.get([w.actor.node_info.remote() for w in fresh], timeout=max(60, self.settings.timeout_s))
        for w, info in zip(fresh, fresh_infos):
            w.info = info
        ids = list(survivors) + [w.id for w in fresh]
        infos = [self.workers[i].info for i in ids]
        names = _host_names(infos)
        slots = assign_slots([info[0] for info in infos])
        self.round += 1
        updates = self._counter('elastic/updates')
        driver_addr = ray.util.get_node_ip_address()
        for i, slot, info in zip(ids, slots, infos):
            w = self.workers[i]
            w.rank, w.node = slot.rank, names[info[0]]
            env = dict(self.env)
            env.update(slot_environment(slot, w.node, driver_addr, self.rendezvous.port, self.secret))
            env['HOROVOD_ELASTIC_WORKER_ID'] = str(w.id)
            if w.ref is None:
                ray.get(w.actor.update_env_vars.remote(env))
            self._publish(w, 'join {} {} {} {} {} {} {} {}'.format(
                self.round, slot.rank, slot.size, slot.local_rank, slot.local_size, slot.cross_rank,
                slot.cross_size, updates))
        for w in fresh:
            w.ref = w.actor.run.remote(fn, args, kwargs)
        self.members = sorted(ids, key=lambda i: self.workers[i].rank)
        self.log.append((time.time(), 'round {} with {} workers ({} new)'.format(self.round, len(ids), len(fresh))))

    def _settle(self, w):
        """The result of a finished fn: ('ok', value) or ('failed', message)."""
        try:
            return 'ok', ray.get(w.ref)
        except ray.exceptions.RayActorError as e:
            return 'failed', 'its Ray actor died ({})'.format(_first_line(e))
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if getattr(e, 'cause', None) is not None else e
            return 'failed', 'it raised {}: {}'.format(type(cause).__name__, _first_line(cause))

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        if callbacks:
            raise NotImplementedError('elastic RayExecutor.run: callbacks are not supported')
        if self.rendezvous is None:
            raise RuntimeError('RayExecutor has no workers: call start() first')
        self._form_round([], fn, args, kwargs)
        results = {}
        gather_start = None
        try:
            while True:
                live = [self.workers[i] for i in self.members if self.workers[i].alive and not self.workers[i].retired]
                refs = {w.ref: w for w in live if w.id not in results}
                if refs:
                    done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=_POLL_SECONDS)
                else:
                    done = []
                for ref in done:
                    w = refs[ref]
                    status, value = self._settle(w)
                    if status == 'ok':
                        results[w.id] = value
                    else:
                        w.alive = False
                        self.log.append((time.time(), 'worker {} (rank {}) failed: {}'.format(w.id, w.rank, value)))
                live = [self.workers[i] for i in self.members if self.workers[i].alive and not self.workers[i].retired]
                if results:
                    # Workers completed: no new round; those still waiting for one are told so.
                    for w in live:
                        if w.id not in results and w.waiting(self._inits(w)):
                            self._publish(w, 'abort the elastic job is finishing: other workers completed training')
                            w.retired = True
                    live = [w for w in live if not w.retired]
                    if all(w.id in results for w in live):
                        return [results[w.id] for w in sorted(live, key=lambda w: w.rank)]
                    continue
                failed = len(live) < len(self.members)
                waiting = [w for w in live if w.waiting(self._inits(w))]
                if not failed and not waiting:
                    gather_start = None
                    continue
                if not live:
                    raise RuntimeError('every Horovod worker of round {} failed; the elastic job cannot continue'
                                       .format(self.round))
                gather_start = gather_start or time.monotonic()
                pending = [w for w in live if w not in waiting]
                if pending and time.monotonic() - gather_start < self.gather_timeout:
                    continue
                for w in pending:
                    self.log.append((time.time(), 'worker {} did not rejoin; killing it'.format(w.id)))
                    w.retired = True
                    ray.kill(w.actor, no_restart=True)
                if self.reset_limit is not None and self.resets >= self.reset_limit:
                    raise RuntimeError('Horovod was shutdown because number of resets during elastic job exceeded '
                                       'limit: {}'.format(self.reset_limit))
                self.resets += 1
                gather_start = None
                self._form_round([w.id for w in sorted(waiting, key=lambda w: w.rank)], fn, args, kwargs)
        except BaseException:
            self._abort_waiting('the elastic job on Ray ended')
            raise

    def _abort_waiting(self, message):
        if self.rendezvous is None:
            return
        for w in self.workers.values():
            if w.alive and not w.retired and w.waiting(self._inits(w)):
                self._publish(w, 'abort ' + message)

    def execute(self, fn, callbacks=None):
        raise NotImplementedError('elastic RayExecutor: use run(fn); execute needs a fixed set of workers')

    def execute_single(self, fn):
        raise NotImplementedError('elastic RayExecutor: use run(fn)')

    def run_remote(self, fn, args=None, kwargs=None):
        raise NotImplementedError('elastic RayExecutor: use run(fn)')
