"""The elastic driver that Ray and Spark share (horovodrun's C++ policy, horovod._core.ElasticRounds,
run over a worker pool by horovod/runner/elastic_driver.py), against a fake worker pool: the
workers are ids whose init() calls the test makes by bumping their counters in the driver's real
rendezvous store, so each protocol step is deterministic and fast. The policy's own unit tests
are tests/cpp/elastic/round_driver_test.cc; the real pools run in test_ray.py,
test_ray_cluster.py, test_ray_netns.py and test_spark_elastic.py."""

import threading
import time

import pytest

from horovod import _core
from horovod.runner.elastic_driver import ElasticDriver, WorkerPool
from horovod.runner.rendezvous import RendezvousServer, StoreClient, StoreTimeout

pytestmark = pytest.mark.timeout(60)


class FakePool(WorkerPool):
    """``room`` workers may start; every worker is on host 'h<id % hosts>'. The test decides
    what each worker's function returns through ``outcomes``."""

    where = 'in the test'

    def __init__(self, room, hosts=1):
        self.room = room
        self.hosts = hosts
        self.started = {}     # id -> env
        self.outcomes = {}    # id -> ('ok', value) | ('failed', why), reported once
        self.killed = []
        self.blacklist = _core.ElasticBlacklist()  # the driver's (Job passes it)
        self.lock = threading.Lock()
        self.started_cv = threading.Condition(self.lock)

    def capacity(self):
        with self.lock:
            return self.room

    def launch(self, ids):
        with self.lock:
            self.room -= len(ids)
            # What the driver blacklisted, as the pool sees it when it places new workers.
            self.blacklisted_at_launch = [h for h in ('h0', 'h1', 'h2') if self.blacklist.blacklisted(h)]

    def locate(self, ids):
        return {i: ('h{}'.format(i % self.hosts), 'h{}'.format(i % self.hosts)) for i in ids}

    def start(self, wid, env):
        with self.lock:
            self.started[wid] = env
            self.started_cv.notify_all()

    def started_ids(self, count, timeout=10):
        """The ids started so far, once there are ``count`` of them: the driver publishes a
        round's assignments before it starts the round's new workers, so a test that has its
        assignments may look before the starts."""
        with self.lock:
            self.started_cv.wait_for(lambda: len(self.started) >= count, timeout)
            return sorted(self.started)

    def finished(self, ranks):
        with self.lock:
            return {i: self.outcomes.pop(i) for i in list(ranks) if i in self.outcomes}

    def kill(self, wid):
        self.killed.append(wid)


class Job:
    """A driver running on its own thread, and the workers' side of the store."""

    def __init__(self, pool, **kwargs):
        self.rendezvous = RendezvousServer('secret', '127.0.0.1')
        options = dict(min_workers=1, max_workers=None, reset_limit=None, elastic_timeout=10)
        options.update(kwargs)
        self.driver = ElasticDriver(pool, self.rendezvous, 'secret', '127.0.0.1', {}, blacklist=pool.blacklist,
                                    **options)
        self.driver.replace_grace = 0
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.result = self.driver.run()
        except Exception as e:  # the test looks at it
            self.error = e

    def start(self):
        self.thread.start()
        return self

    def init(self, *wids):
        """Workers ``wids`` call init() together: their counters go up; returns their next
        assignments (one string for one worker, else a list)."""
        store = self.rendezvous.store
        pending = []
        for wid in wids:
            inits = store.add('elastic/inits/{}'.format(wid), 1)
            pending.append((wid, inits - 1))
        store.add('elastic/events', 1)
        out = [self.assignment(wid, k) for wid, k in pending]
        return out[0] if len(out) == 1 else out

    def assignment(self, wid, k, timeout=10):
        with StoreClient('127.0.0.1', self.rendezvous.port, 'secret') as store:
            try:
                return store.get('elastic/assign/{}/{}'.format(wid, k), timeout).decode()
            except StoreTimeout:
                raise AssertionError('no assignment {} for {}'.format(k, wid)) from None

    def join(self, timeout=10):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), 'the driver did not end'
        self.rendezvous.shutdown()


def test_lost_worker_is_replaced_survivors_first():
    pool = FakePool(room=3, hosts=3)
    job = Job(pool, max_workers=3).start()
    first = job.init(0, 1, 2)
    assert first == ['join 0 0 3 0 1 0 3 0', 'join 0 1 3 0 1 1 3 0', 'join 0 2 3 0 1 2 3 0']
    assert pool.started_ids(3) == [0, 1, 2]
    pool.room += 1                      # the lost worker's resources come free
    pool.outcomes[0] = ('failed', 'it raised RuntimeError: boom')
    # The survivors' engines see the loss and call init() again.
    second = job.init(1, 2)
    # Survivors keep their order (old rank 1 becomes rank 0); the new worker 3 comes last.
    assert [a.split()[:4] for a in second] == [['join', '1', '0', '3'], ['join', '1', '1', '3']]
    assert job.init(3).split()[:4] == ['join', '1', '2', '3']
    for w in (1, 2, 3):
        pool.outcomes[w] = ('ok', w * 10)
    job.join()
    assert job.error is None and job.result == [10, 20, 30]
    assert [what for _, what in job.driver.log] == [
        'round 0 with 3 workers (3 new)', 'worker 0 (rank 0 of round 0) failed: it raised RuntimeError: boom',
        'round 1 with 3 workers (1 new)']
    assert job.driver.next_id == 4


def test_a_worker_still_waiting_when_the_others_completed_is_removed():
    """As under horovodrun, with its message: removed (its init() exits quietly), not aborted."""
    pool = FakePool(room=2)
    job = Job(pool, max_workers=2).start()
    assert [a[:8] for a in job.init(0, 1)] == ['join 0 0', 'join 0 1']
    pool.outcomes[0] = ('ok', 'done')
    assert job.init(1) == 'removed the elastic job is finishing: another worker completed training'
    job.join()
    assert job.error is None and job.result == ['done']


def test_reset_limit_and_a_round_without_survivors_are_errors():
    pool = FakePool(room=2)
    job = Job(pool, max_workers=2, reset_limit=0).start()
    job.init(0, 1)
    pool.outcomes[1] = ('failed', 'its Ray actor died')
    # The survivor asking for the next round is told to abort, with the reason.
    assert job.init(0) == 'abort Horovod was shutdown because number of resets during elastic job exceeded limit: 0'
    job.join()
    assert 'number of resets during elastic job exceeded limit: 0' in str(job.error)

    pool = FakePool(room=1)
    job = Job(pool, max_workers=1).start()
    job.init(0)
    pool.outcomes[0] = ('failed', 'it raised ValueError: x')
    job.join()
    assert 'every worker of round 0 failed; the elastic job cannot continue' in str(job.error)


def test_with_a_cooldown_range_the_failed_workers_host_is_blacklisted_for_the_pool():
    pool = FakePool(room=2, hosts=2)
    pool.blacklist = _core.ElasticBlacklist((600, 600))
    job = Job(pool, max_workers=2).start()
    job.init(0, 1)
    assert pool.blacklisted_at_launch == []
    pool.room += 1
    pool.outcomes[1] = ('failed', 'its Ray actor died')
    assert job.init(0).split()[:4] == ['join', '1', '0', '2']
    assert pool.blacklisted_at_launch == ['h1']  # the pool keeps the replacement off h1
    assert 'blacklisting host h1 (a worker failed there) for 600.0 s' in [what for _, what in job.driver.log]
    job.init(2)
    pool.outcomes[0] = ('ok', 'a')
    pool.outcomes[2] = ('ok', 'b')
    job.join()
    assert job.error is None and job.result == ['a', 'b']
    assert pool.blacklist.blacklisted('h1')  # for the next job too, until the cooldown ends
    pool.blacklist.advance_clock(600)
    assert not pool.blacklist.blacklisted('h1')


def test_without_a_cooldown_range_no_host_is_blacklisted():
    pool = FakePool(room=2, hosts=1)
    job = Job(pool, max_workers=2).start()
    job.init(0, 1)
    pool.room += 1
    pool.outcomes[1] = ('failed', 'its Ray actor died')
    assert job.init(0).split()[:4] == ['join', '1', '0', '2']  # replaced on the same host
    assert pool.blacklisted_at_launch == []
    job.init(2)
    pool.outcomes[0] = pool.outcomes[2] = ('ok', None)
    job.join()
    assert job.error is None and not any('blacklisting' in what for _, what in job.driver.log)


def test_min_workers_out_of_reach_is_an_error_within_elastic_timeout():
    pool = FakePool(room=1)
    started = time.monotonic()
    job = Job(pool, min_workers=2, elastic_timeout=1).start()
    job.join()
    assert time.monotonic() - started < 5
    assert 'Timed out after 1.0 s waiting for 2 Horovod workers in the test (1 possible)' in str(job.error)


def test_gather_timeout_comes_from_the_environment_as_under_horovodrun(monkeypatch):
    # Ray and Spark jobs read HOROVOD_ELASTIC_GATHER_TIMEOUT like horovodrun, default 30 s (they
    # used a fixed 10 s and ignored the variable).
    from horovod.runner.elastic_driver import gather_timeout_seconds
    monkeypatch.delenv('HOROVOD_ELASTIC_GATHER_TIMEOUT', raising=False)
    assert gather_timeout_seconds() == 30.0
    assert gather_timeout_seconds({'HOROVOD_ELASTIC_GATHER_TIMEOUT': '7.5'}) == 7.5
    for bad in ('0', '-3', 'soon'):
        with pytest.raises(ValueError, match='HOROVOD_ELASTIC_GATHER_TIMEOUT'):
            gather_timeout_seconds({'HOROVOD_ELASTIC_GATHER_TIMEOUT': bad})
    monkeypatch.setenv('HOROVOD_ELASTIC_GATHER_TIMEOUT', '12')
    pool = FakePool(room=2)
    job = Job(pool)
    assert job.driver.gather_timeout == 12.0
    job.rendezvous.shutdown()
