"""The driver side of Horovod's elastic rendezvous, for jobs whose workers a framework starts for
us: ``RayExecutor(min_workers=...)`` (actors) and ``horovod.spark.run_elastic`` (Spark tasks).
It answers the protocol that horovodrun's elastic driver speaks (docs/elastic.md) from the
process that serves the job's rendezvous store, through horovodrun's own code for that protocol's
keys and assignment text (``RendezvousServer.store.publish_join`` etc., bound from C++):

* Every worker process has an id for its whole life (``HOROVOD_ELASTIC_WORKER_ID``). Each of
  its ``init()`` calls bumps ``elastic/inits/<id>`` and ``elastic/events`` in the store and
  waits for ``elastic/assign/<id>/<k>``: ``join <round> <rank> <size> <local_rank> <local_size>
  <cross_rank> <cross_size> <updates>``, ``removed <message>`` (its init() prints the message
  and the process exits quietly, status 0) or ``abort <message>`` (its init() raises that).
* ``run()`` starts as many workers as the pool has room for (at least ``min_workers``, waiting up
  to ``elastic_timeout``; at most ``max_workers``). A worker whose function returns is done; one
  that fails (raises, its process or actor dies) is gone, and the others see
  ``HorovodInternalError``, roll back to their last commit and call ``init()`` again.
* When every live worker of the round has asked again (or ``gather_timeout`` passed: the rest
  are killed), a new round forms: survivors first in their old rank order (so that rank 0 holds
  the state to broadcast), then new workers for free capacity up to ``max_workers`` (waiting up
  to 5 s for the room to replace the lost workers before forming a smaller round).
* The job ends with the final round's results in rank order once its workers return; it fails
  with RuntimeError after ``reset_limit`` resets, when no worker survives a round, or when
  ``min_workers`` cannot be reached in time. Workers still waiting for a round when others
  completed training are removed (they exit quietly, as under horovodrun); when the job fails,
  they are told to abort.

What differs between frameworks is how a worker is started, placed, watched and killed: that is
the ``WorkerPool`` this driver is given.
"""

import os
import time

from horovod.runner.topology import assign_slots, slot_environment

__all__ = ['ElasticDriver', 'WorkerPool', 'elastic_environment']

_POLL_SECONDS = 0.05
_CAPACITY_POLL_SECONDS = 0.5
REPLACE_GRACE_SECONDS = 5.0
GATHER_TIMEOUT_SECONDS = 30.0  # HOROVOD_ELASTIC_GATHER_TIMEOUT's default, as in horovodrun


def gather_timeout_seconds(environ=None):
    """The driver's gather timeout: ``HOROVOD_ELASTIC_GATHER_TIMEOUT`` (seconds) in the driver's
    environment, else 30 s, as horovodrun. A worker gets this long, once a reset began, to re-join
    (a live survivor re-joins at its next collective) before it is killed as a straggler."""
    raw = (os.environ if environ is None else environ).get('HOROVOD_ELASTIC_GATHER_TIMEOUT', '').strip()
    if not raw:
        return GATHER_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError('HOROVOD_ELASTIC_GATHER_TIMEOUT={!r}: expected a positive number of seconds'
                         .format(raw))
    return value


def elastic_environment(elastic_timeout, env=None):
    """The variables every elastic worker gets (as horovodrun's elastic driver gives them), on
    top of ``env``: a tensor stalled for 2 minutes fails the round (unless the user chose),
    so that a silent worker becomes a reset instead of a hang."""
    out = dict(env or {})
    out['HOROVOD_ELASTIC'] = '1'
    out['HOROVOD_ELASTIC_TIMEOUT'] = str(float(elastic_timeout))
    if 'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS' not in out and 'HOROVOD_STALL_CHECK_DISABLE' not in out:
        out['HOROVOD_STALL_SHUTDOWN_TIME_SECONDS'] = '120'
    return out


class WorkerPool:
    """How a framework starts and watches the workers of an elastic job. Ids are the driver's.

    ``where`` names the framework in messages ("on Ray"); ``min_name`` and ``start_name`` are
    the user's names for the minimum and the first round's size ("min_workers");
    ``capacity_hint`` says how to get more capacity."""

    where = ''
    min_name = 'min_workers'
    start_name = 'min_workers'
    capacity_hint = ''

    def capacity(self):
        """How many more workers could start now."""
        raise NotImplementedError

    def launch(self, ids):
        """Starts a worker (an actor, a task) for each id; its function does not run yet."""
        raise NotImplementedError

    def locate(self, ids):
        """Waits until the launched workers ``ids`` are placed: {id: (host_key, host_name)}.
        Workers with equal host keys share a host (local ranks). Raises RuntimeError when they
        are not placed in the pool's start timeout."""
        raise NotImplementedError

    def start(self, wid, env):
        """Gives worker ``wid`` its environment and runs the function in it. Called after the
        driver published its first assignment."""
        raise NotImplementedError

    def finished(self, ranks):
        """Of the running workers ``ranks`` ({id: rank in its latest round}), those whose
        function ended: {id: ('ok', return value) or ('failed', what happened)}. Non-blocking;
        each worker is reported once."""
        raise NotImplementedError

    def kill(self, wid):
        raise NotImplementedError


class _Worker:
    def __init__(self, wid):
        self.id = wid
        self.started = False
        self.published = 0       # assignments written
        self.rank = None         # in the latest round it joined
        self.host = None         # (host_key, host_name)
        self.alive = True
        self.retired = False     # removed, told to stop, or killed as a straggler

    def waiting(self, inits):
        return self.alive and not self.retired and inits > self.published


class ElasticDriver:
    """Runs one elastic job on ``pool`` against ``rendezvous`` (a RendezvousServer in this
    process). ``env``: every worker's variables (see elastic_environment); each also gets its
    slot's ``HOROVOD_*`` variables pointing at ``driver_addr``:``rendezvous.port``.
    ``max_workers`` None: as many as the pool has room for. ``reset_limit`` None: unlimited.
    Worker ids start at ``first_id`` (a later job on the same store must not reuse ids).
    ``start_workers``: the first round waits for this many (default ``min_workers``), as
    horovodrun's ``-np``. ``say``: called with each line the driver logs."""

    def __init__(self, pool, rendezvous, secret, driver_addr, env, min_workers, max_workers, reset_limit,
                 elastic_timeout, gather_timeout=None, log=None, first_id=0, start_workers=None,
                 say=None):
        self.pool = pool
        self.rendezvous = rendezvous
        self.secret = secret
        self.driver_addr = driver_addr
        self.env = dict(env)
        self.min_workers = min_workers
        self.start_workers = max(min_workers, start_workers or 0)
        self.max_workers = max_workers
        self.reset_limit = reset_limit
        self.elastic_timeout = elastic_timeout
        self.gather_timeout = gather_timeout_seconds() if gather_timeout is None else gather_timeout
        self.replace_grace = REPLACE_GRACE_SECONDS
        self.workers = {}        # id -> _Worker
        self.members = []        # ids of the latest round, in rank order
        self.round = -1
        self.resets = 0
        self.next_id = first_id  # ids are never reused within one rendezvous store
        self.log = log if log is not None else []   # (time, what) for the caller and the tests
        self.say = say

    def _note(self, what):
        self.log.append((time.time(), what))
        if self.say is not None:
            self.say(what)

    # -- the store: horovodrun's side of the protocol (keys and assignment text), bound in _core ---

    def _publish_join(self, w, slot, host_updates_seen):
        self.rendezvous.store.publish_join(w.id, w.published, self.round, slot.rank, slot.size, slot.local_rank,
                                           slot.local_size, slot.cross_rank, slot.cross_size, host_updates_seen)
        w.published += 1

    def _publish_removed(self, w, message):
        self.rendezvous.store.publish_removed(w.id, w.published, message)
        w.published += 1

    def _publish_abort(self, w, message):
        self.rendezvous.store.publish_abort(w.id, w.published, message)
        w.published += 1

    def _inits(self, w):
        return self.rendezvous.store.elastic_inits(w.id)

    # -- rounds ----------------------------------------------------------------------------------

    def _form_round(self, survivors):
        """Places survivors (ids, old rank order) and new workers; publishes; starts the new."""
        started = time.monotonic()
        deadline = started + self.elastic_timeout
        needed = self.start_workers if self.round < 0 else self.min_workers
        # After a loss, the lost worker's resources take a moment to come free (a dead actor, a
        # task that is ending): wait a little for enough room to replace it before going smaller.
        target = min(self.max_workers or 1 << 30, max(needed, len(self.members)))
        while True:
            room = (self.max_workers or 1 << 30) - len(survivors)
            new_count = max(0, min(room, self.pool.capacity()))
            have = len(survivors) + new_count
            if have >= target or (have >= needed and time.monotonic() - started >= self.replace_grace):
                break
            if time.monotonic() > deadline:
                raise RuntimeError('Timed out after {:.1f} s waiting for {} Horovod workers {} ({} possible): {} or '
                                   'lower {}'.format(self.elastic_timeout, needed, self.pool.where,
                                                     len(survivors) + new_count, self.pool.capacity_hint,
                                                     self.pool.min_name if needed == self.min_workers
                                                     else self.pool.start_name))
            time.sleep(_CAPACITY_POLL_SECONDS)
        if self.round >= 0 and not survivors:
            raise RuntimeError('No hosts from previous set remaining, unable to broadcast state.')
        fresh = []
        for _ in range(new_count):
            w = _Worker(self.next_id)
            self.next_id += 1
            self.workers[w.id] = w
            fresh.append(w)
        if fresh:
            self.pool.launch([w.id for w in fresh])
            for wid, host in self.pool.locate([w.id for w in fresh]).items():
                self.workers[wid].host = host
        ids = list(survivors) + [w.id for w in fresh]
        slots = assign_slots([self.workers[i].host[0] for i in ids])
        self.round += 1
        updates = self.rendezvous.store.elastic_host_updates()
        for i, slot in zip(ids, slots):
            w = self.workers[i]
            w.rank = slot.rank
            self._publish_join(w, slot, updates)
        for w, slot in zip([self.workers[i] for i in ids], slots):
            if not w.started:
                env = dict(self.env)
                env.update(slot_environment(slot, w.host[1], self.driver_addr, self.rendezvous.port, self.secret))
                env['HOROVOD_ELASTIC_WORKER_ID'] = str(w.id)
                self.pool.start(w.id, env)
                w.started = True
        self.members = sorted(ids, key=lambda i: self.workers[i].rank)
        self._note('round {} with {} workers ({} new)'.format(self.round, len(ids), len(fresh)))

    def _live(self):
        return [self.workers[i] for i in self.members if self.workers[i].alive and not self.workers[i].retired]

    def run(self):
        """Forms the first round and drives the job to its end: the final round's results in
        rank order, or RuntimeError."""
        try:
            self._form_round([])
            return self._drive()
        except BaseException as e:
            self._abort_waiting('the elastic job ended: {}'.format(str(e).strip().splitlines()[0] if str(e).strip()
                                                                   else type(e).__name__))
            raise

    def _drive(self):
        results = {}
        gather_start = None
        while True:
            running = {w.id: w.rank for w in self._live() if w.id not in results}
            for wid, (status, value) in self.pool.finished(running).items():
                w = self.workers[wid]
                if status == 'ok':
                    results[wid] = value
                else:
                    w.alive = False
                    self._note('worker {} (rank {}) failed: {}'.format(wid, w.rank, value))
            live = self._live()
            if results:
                # Workers completed: no new round; those still waiting for one leave quietly.
                for w in live:
                    if w.id not in results and w.waiting(self._inits(w)):
                        self._publish_removed(w, 'worker {} has been removed from elastic job: other workers '
                                                 'completed training'.format(w.id))
                        self._note('worker {} removed: other workers completed training'.format(w.id))
                        w.retired = True
                live = [w for w in live if not w.retired]
                if all(w.id in results for w in live):
                    return [results[w.id] for w in sorted(live, key=lambda w: w.rank)]
                time.sleep(_POLL_SECONDS)
                continue
            failed = len(live) < len(self.members)
            waiting = [w for w in live if w.waiting(self._inits(w))]
            if not failed and not waiting:
                gather_start = None
                time.sleep(_POLL_SECONDS)
                continue
            if not live:
                raise RuntimeError('every Horovod worker of round {} failed; the elastic job cannot continue'
                                   .format(self.round))
            gather_start = gather_start or time.monotonic()
            pending = [w for w in live if w not in waiting]
            if pending and time.monotonic() - gather_start < self.gather_timeout:
                time.sleep(_POLL_SECONDS)
                continue
            for w in pending:
                self._note('worker {} did not rejoin; killing it'.format(w.id))
                w.retired = True
                self.pool.kill(w.id)
            if self.reset_limit is not None and self.resets >= self.reset_limit:
                raise RuntimeError('Horovod was shutdown because number of resets during elastic job exceeded '
                                   'limit: {}'.format(self.reset_limit))
            self.resets += 1
            gather_start = None
            self._form_round([w.id for w in sorted(waiting, key=lambda w: w.rank)])

    def _abort_waiting(self, message):
        for w in self.workers.values():
            if w.alive and not w.retired and w.waiting(self._inits(w)):
                self._publish_abort(w, message)
