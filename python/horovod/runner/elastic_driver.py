"""The driver side of Horovod's elastic rendezvous for jobs whose workers a framework starts for
us: ``RayExecutor(min_workers=...)`` (actors) and ``horovod.spark.run_elastic`` (Spark tasks).

The policy (which workers form each round, when a round ends, when the job is over) is
horovodrun's own elastic driver, bound from C++ as ``horovod._core.ElasticRounds`` in its "landed"
placement mode (docs/elastic.md): the framework puts each new worker where it has room, the
pool reports the host, and the round is formed from those hosts. This module is only the loop
that runs it over a framework's ``WorkerPool``: it reports the pool's room and its workers' ends,
calls ``tick()``, and executes the actions: launch a worker, start it with its slot's
environment, kill a straggler, fail the job. In short:

* Every worker process has an id for its whole life (``HOROVOD_ELASTIC_WORKER_ID``); each of its
  ``init()`` calls asks the driver (through the rendezvous store) for its place in the next round.
* ``run()`` starts as many workers as the pool has room for (at least ``min_workers``, waiting up
  to ``elastic_timeout``; at most ``max_workers``). A worker whose function returns is done; one
  that fails (raises, its process or actor dies) is gone, and the others see
  ``HorovodInternalError``, roll back to their last commit and call ``init()`` again.
* When every live worker of the round has asked again (or ``gather_timeout`` passed: the rest
  are killed), a new round forms: survivors first in their old rank order (so that rank 0 holds
  the state to broadcast), then new workers for free room up to ``max_workers`` (waiting up to
  5 s for the room to replace the lost workers before forming a smaller round).
* The job ends with the final round's results in rank order once its workers return; it fails
  with RuntimeError after ``reset_limit`` resets, when no worker survives a round, or when
  ``min_workers`` cannot be reached in time. Workers still waiting for a round when others
  completed training are removed (they exit quietly, as under horovodrun); when the job fails,
  they are told to abort.
"""

import os
import time

from horovod import _core
from horovod.runner.topology import Slot, slot_environment

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
        """How many more workers could start now (asked while a round waits for room)."""
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


class ElasticDriver:
    """Runs one elastic job on ``pool`` against ``rendezvous`` (a RendezvousServer in this
    process). ``env``: every worker's variables (see elastic_environment); each also gets its
    slot's ``HOROVOD_*`` variables pointing at ``driver_addr``:``rendezvous.port``.
    ``max_workers`` None: as many as the pool has room for. ``reset_limit`` None: unlimited.
    Worker ids start at ``first_id`` (a later job on the same store must not reuse ids; see
    ``next_id`` after ``run()``). ``start_workers``: the first round waits for this many (default
    ``min_workers``), as horovodrun's ``-np``. ``say``: called with each line the driver logs.
    ``blacklist``: a ``horovod._core.ElasticBlacklist`` (kept across jobs, as the hosts are): with
    a cooldown range the driver blacklists the host of a failed worker (horovodrun's rule) and the
    pool keeps new workers off it (``blacklist.blacklisted(host_key)``); None: no host is."""

    def __init__(self, pool, rendezvous, secret, driver_addr, env, min_workers, max_workers, reset_limit,
                 elastic_timeout, gather_timeout=None, log=None, first_id=0, start_workers=None,
                 say=None, blacklist=None):
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
        self.next_id = first_id  # ids are never reused within one rendezvous store
        self.log = log if log is not None else []   # (time, what) for the caller and the tests
        self.say = say
        self.blacklist = blacklist if blacklist is not None else _core.ElasticBlacklist()
        self._hosts = {}         # id -> (host_key, host_name) where the pool placed it

    def _note(self, what):
        self.log.append((time.time(), what))
        if self.say is not None:
            self.say(what)

    def run(self):
        """Drives the job to its end: the final round's results in rank order, or RuntimeError."""
        rounds = _core.ElasticRounds(self.rendezvous.store, self.blacklist, self.start_workers, self.min_workers,
                                     self.max_workers, self.reset_limit, float(self.elastic_timeout),
                                     float(self.gather_timeout), float(self.replace_grace), self.next_id)
        try:
            return self._drive(rounds)
        except BaseException as e:
            # Workers waiting for a round are told to abort with the reason (once: after a
            # 'finish' action the driver has stopped and ignores this).
            text = str(e).strip()
            rounds.fail('the elastic job ended: {}'.format(text.splitlines()[0] if text else type(e).__name__))
            raise
        finally:
            self.next_id = rounds.next_id

    def _drive(self, rounds):
        results = {}   # id -> (rank, what its function returned)
        while True:
            ranks = dict(rounds.members())
            for wid, (status, value) in self.pool.finished(ranks).items():
                if status == 'ok':
                    results[wid] = (ranks[wid], value)
                rounds.worker_exited(wid, status == 'ok', value if status != 'ok' else 'its function returned')
            if results:
                # Workers completed: no new round; the driver removes those still waiting for one.
                self._execute(rounds, rounds.tick())
                if not rounds.members():
                    return [value for _, value in sorted(results.values(), key=lambda rv: rv[0])]
                time.sleep(_POLL_SECONDS)
                continue
            waiting_for_room = rounds.wants_room
            if waiting_for_room:
                rounds.capacity(self.pool.capacity())
            if not self._execute(rounds, rounds.tick()):
                time.sleep(_CAPACITY_POLL_SECONDS if waiting_for_room else _POLL_SECONDS)

    def _execute(self, rounds, actions):
        """Executes the driver's actions; True when they formed (part of) a round."""
        launch = []
        busy = False
        for action in actions:
            if action.kind == 'log':
                self._note(action.text)
            elif action.kind == 'launch':
                launch.append(action.id)
            elif action.kind == 'start':
                self._start(action)
                busy = True
            elif action.kind == 'kill':
                self.pool.kill(action.id)
            elif action.kind == 'finish':
                raise RuntimeError(self._failure(action))
        if launch:
            self.pool.launch(launch)
            for wid, host in self.pool.locate(launch).items():
                self._hosts[wid] = host
                rounds.worker_landed(wid, str(host[0]))
            busy = True
        return busy

    def _start(self, action):
        slot = Slot(action.rank, action.size, action.local_rank, action.local_size, action.cross_rank,
                    action.cross_size, self._hosts[action.id][0])
        env = dict(self.env)
        env.update(slot_environment(slot, self._hosts[action.id][1], self.driver_addr, self.rendezvous.port,
                                    self.secret))
        env['HOROVOD_ELASTIC_WORKER_ID'] = str(action.id)
        self.pool.start(action.id, env)

    def _failure(self, action):
        if action.reason != 'timed_out':
            return action.text
        return ('Timed out after {:.1f} s waiting for {} Horovod workers {} ({} possible): {} or lower {}'.format(
            self.elastic_timeout, action.needed, self.pool.where, action.have, self.pool.capacity_hint,
            self.pool.min_name if action.needed == self.min_workers else self.pool.start_name))
