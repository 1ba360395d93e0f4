"""horovod.ray on a real local Ray cluster (``ray.init(num_cpus=2)``, started once for the file).

Each test is bounded by pytest-timeout; a test that starts workers shuts them down and checks
that the cluster's CPUs are free again (no leaked actors or placement groups)."""

import os
import sys
import threading
import time

import pytest

ray = pytest.importorskip('ray')
from horovod.ray import ElasticRayExecutor, RayExecutor, report  # noqa: E402
from horovod.ray.static import WorkerFailedError  # noqa: E402
from horovod.ray.worker import BaseHorovodWorker  # noqa: E402
from horovod.runner.elastic.discovery import FixedHosts  # noqa: E402
from horovod.runner.elastic.settings import ElasticSettings  # noqa: E402

import ray_cluster_util  # noqa: E402
from ray_cluster_util import elastic_train, wait_for_free_cpus  # noqa: E402

pytestmark = pytest.mark.timeout(240)
# The workers cannot import this test module: ship its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(ray_cluster_util)

CLUSTER_CPUS = 2


def allreduce_rank_plus_one():
    import torch
    import horovod.torch as hvd
    hvd.init()
    return hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item()


def test_start_without_ray_init_names_the_fix():
    assert not ray.is_initialized()
    executor = RayExecutor(RayExecutor.create_settings(), num_workers=2)
    with pytest.raises(RuntimeError, match=r'Ray is not initialized: call ray.init\(\)'):
        executor.start()


@pytest.mark.parametrize('kwargs, error, pattern', [
    (dict(num_workers=2, max_workers=3), ValueError, 'max_workers requires a positive min_workers'),
    (dict(num_workers=2, min_workers=1), ValueError, 'Both min_workers and num_workers'),
    (dict(num_workers=2, reset_limit=3), ValueError, 'reset_limit and cooldown_range apply to elastic mode'),
    (dict(min_workers=1, cooldown_range=(5, 1)), ValueError, r'cooldown_range must be \(min, max\) seconds'),
    (dict(min_workers=1, override_discovery=False), ValueError, 'set settings.discovery to a HostDiscovery'),
    (dict(min_workers=2, max_workers=1), ValueError, 'must not be below min_workers'),
    (dict(num_workers=2, gpus_per_worker=1), ValueError, 'use_gpu is False'),
    (dict(), ValueError, 'Give num_workers'),
    (dict(num_workers=0), ValueError, 'at least 1'),
])
def test_bad_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        RayExecutor(RayExecutor.create_settings(), **kwargs)


def test_elastic_alias_checks_its_arguments():
    settings = ElasticRayExecutor.create_settings(min_num_proc=1, max_num_proc=2, reset_limit=3)
    assert (settings.min_num_proc, settings.max_num_proc, settings.reset_limit) == (1, 2, 3)
    assert isinstance(settings, ElasticSettings) and settings.discovery is None
    with pytest.warns(DeprecationWarning, match='min_np is deprecated'):
        settings = ElasticRayExecutor.create_settings(min_np=2, max_np=4, cooldown_range=(1, 9))
    assert (settings.min_num_proc, settings.max_num_proc, settings.cooldown_range) == (2, 4, (1, 9))
    with pytest.raises(ValueError, match='gpus_per_slot'):
        ElasticRayExecutor(None, gpus_per_slot=1)


def test_create_settings_writes_ssh_key_once(tmp_path):
    key = tmp_path / 'id'
    settings = RayExecutor.create_settings(timeout_s=7, ssh_identity_file=str(key), ssh_str='KEY', nics={'lo'})
    assert key.read_text() == 'KEY' and (os.stat(key).st_mode & 0o777) == 0o600
    RayExecutor.create_settings(ssh_identity_file=str(key), ssh_str='OTHER')
    assert key.read_text() == 'KEY'
    assert settings.worker_environment() == {'HOROVOD_GLOO_TIMEOUT_SECONDS': '7', 'HOROVOD_GLOO_IFACE': 'lo'}


@pytest.fixture(scope='module')
def cluster():
    ray.init(address='local', num_cpus=CLUSTER_CPUS, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class Counter:
    def __init__(self, start):
        self.value = start

    def bump(self):
        import os
        self.value += 1 + int(os.environ['HOROVOD_RANK'])
        return self.value


def test_two_workers_allreduce_and_every_call(cluster):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2)
    executor.start(executable_cls=Counter, executable_args=[10], extra_env_vars={'MY_FLAG': 'x'})
    try:
        assert executor.run(allreduce_rank_plus_one) == [3.0, 3.0]
        env = executor.run(lambda keys: [os.environ.get(k) for k in keys],
                           args=[['HOROVOD_RANK', 'HOROVOD_SIZE', 'HOROVOD_LOCAL_RANK', 'HOROVOD_CROSS_SIZE',
                                  'MY_FLAG']])
        assert env == [['0', '2', '0', '1', 'x'], ['1', '2', '1', '1', 'x']]
        assert executor.run(lambda a, b=0: a * 10 + b, args=[4], kwargs={'b': 2}) == [42, 42]
        assert executor.execute(lambda counter: counter.bump()) == [11, 12]
        assert executor.execute_single(lambda counter: counter.bump()) == 12
        refs = executor.run_remote(lambda: int(os.environ['HOROVOD_RANK']))
        assert ray.get(refs) == [0, 1]
        seen = []

        def reporting():
            for step in range(3):
                report({'step': step, 'rank': int(os.environ['HOROVOD_RANK'])})
            return 'done'

        assert executor.run(reporting, callbacks=[seen.append]) == ['done', 'done']
        assert seen == [{'step': s, 'rank': 0} for s in range(3)]
    finally:
        executor.shutdown()
    assert wait_for_free_cpus()


def test_raising_worker_names_rank_and_releases_the_others(cluster):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=20), num_workers=2)
    executor.start()

    def fail_on_rank_one():
        import torch
        import horovod.torch as hvd
        hvd.init()
        if hvd.rank() == 1:
            try:
                open('/no/such/shard')
            except OSError as e:
                raise ValueError('bad shard on this rank') from e
        return hvd.allreduce(torch.ones(1)).item()  # waits for rank 1, which never comes

    started = time.monotonic()
    # The cause travels with the error: the worker's log is not where a Ray user looks.
    with pytest.raises(WorkerFailedError, match=r"rank 1 raised ValueError: bad shard on this rank \(caused by "
                                                r"FileNotFoundError: .*'/no/such/shard'\)") as info:
        executor.run(fail_on_rank_one)
    print(info.value)
    assert info.value.rank == 1
    assert time.monotonic() - started < 60
    assert wait_for_free_cpus()
    with pytest.raises(RuntimeError, match='shut down after a worker failed'):
        executor.run(allreduce_rank_plus_one)
    executor.shutdown()


def test_killed_actor_is_an_error_within_seconds(cluster):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=20), num_workers=2)
    executor.start()
    assert executor.run(allreduce_rank_plus_one) == [3.0, 3.0]  # both engines are up
    victim = executor._job.workers[1]

    def allreduce_for_a_long_time():
        import torch
        import horovod.torch as hvd
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            hvd.allreduce(torch.ones(1000))
        return 'finished'

    killer = threading.Timer(3.0, lambda: ray.kill(victim, no_restart=True))
    killer.start()
    started = time.monotonic()
    try:
        with pytest.raises(WorkerFailedError, match=r'rank 1 died during run') as info:
            executor.run(allreduce_for_a_long_time)
    finally:
        killer.cancel()
    print(info.value, '({:.1f} s)'.format(time.monotonic() - started))
    assert info.value.rank == 1
    assert time.monotonic() - started < 30
    assert wait_for_free_cpus()


def test_more_workers_than_cpus_is_a_clear_error(cluster):
    settings = RayExecutor.create_settings(placement_group_timeout_s=3)
    executor = RayExecutor(settings, num_workers=CLUSTER_CPUS + 1)
    with pytest.raises(RuntimeError, match=r'Could not reserve resources for 3 Horovod workers .*CPU'):
        executor.start()
    assert wait_for_free_cpus()


def test_elastic_job_replaces_a_lost_worker(cluster, tmp_path):
    executor = RayExecutor(
        # A replacement actor starts from nothing (imports torch): on a loaded 2-CPU machine that
        # took over 30 s, longer than the survivor's rendezvous timeout (timeout_s).
        RayExecutor.create_settings(timeout_s=120), min_workers=1, max_workers=2, elastic_timeout=60)
    executor.start()
    try:
        results = executor.run(elastic_train, args=[str(tmp_path / 'died')])
        log = [what for _, what in executor._job.log]
    finally:
        executor.shutdown()
    assert [(rank, size) for rank, size, _, _ in results] == [(0, 2), (1, 2)]
    survivor, replacement = results[0][2], results[1][2]
    assert survivor == [(e, 0, 2, 1) for e in range(5)]
    assert replacement == [(3, 1, 2, 1), (4, 1, 2, 1)]  # joined after the rollback to epoch 3's commit
    assert results[0][3] == results[1][3]         # state synced from rank 0
    assert log[0] == 'round 0 with 2 workers (2 new)' and log[-1] == 'round 1 with 2 workers (1 new)', log
    assert any('failed' in line for line in log), log
    assert wait_for_free_cpus()


def test_worker_actor_methods(cluster):
    """What custom executors call on a worker: its node, its GPUs, and a queue for report()."""
    from ray.util.queue import Queue
    worker = ray.remote(num_cpus=1)(BaseHorovodWorker).remote()
    queue = Queue(actor_options={'num_cpus': 0})
    try:
        assert ray.get(worker.node_id.remote()) == ray.get_runtime_context().get_node_id()
        assert ray.get(worker.get_gpu_ids.remote()) == []
        ray.get(worker.set_queue.remote(queue))
        ray.get(worker.update_env_vars.remote({'HOROVOD_RANK': '0'}))
        ray.get(worker.run.remote(lambda: report('from rank 0')))
        assert queue.get(timeout=30) == 'from rank 0'
        ray.get(worker.update_env_vars.remote({'HOROVOD_RANK': '1'}))
        ray.get(worker.run.remote(lambda: report('from rank 1')))
        assert queue.empty()
    finally:
        ray.kill(worker)
        queue.shutdown()
    assert wait_for_free_cpus()


class ElasticTrainer:
    """The executable of the elastic execute() test: trains with elastic_train, reporting from rank 0."""

    def __init__(self, marker):
        self.marker = marker

    def train(self):
        report('start')
        result = elastic_train(self.marker)
        report('done')
        return result


def test_elastic_execute_with_callbacks_leaves_the_failed_node_out(cluster, tmp_path):
    # One node: once rank 1 fails there, the node cools down (600 s) and the job goes on without
    # a replacement, which it would otherwise start at once (test_elastic_job_replaces_a_lost_worker).
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), min_workers=1, max_workers=2,
                           elastic_timeout=60, cooldown_range=(600, 600))
    executor.start(executable_cls=ElasticTrainer, executable_args=[str(tmp_path / 'died')])
    seen = []
    try:
        results = executor.execute(lambda trainer: trainer.train(), callbacks=[seen.append])
        log = [what for _, what in executor._job.log]
    finally:
        executor.shutdown()
    assert [(rank, size) for rank, size, _, _ in results] == [(0, 1)]
    assert results[0][2] == [(0, 0, 2, 1), (1, 0, 2, 1), (2, 0, 2, 1), (3, 0, 1, 1), (4, 0, 1, 1)]
    node = ray.get_runtime_context().get_node_id()
    # The driver's blacklisting, horovodrun's (a node is a host here), for the cooldown.
    assert 'blacklisting host {} (a worker failed there) for 600.0 s'.format(node) in log, log
    assert log[-1] == 'round 1 with 1 workers (0 new)', log
    assert seen == ['start', 'done']  # rank 0's reports only: the round-0 start, the final round's end
    assert wait_for_free_cpus()


def size_of_the_job():
    import horovod.torch as hvd
    hvd.init()
    return hvd.size()


def test_elastic_job_takes_nodes_and_slots_from_a_host_discovery(cluster):
    settings = RayExecutor.create_settings(timeout_s=60)
    settings.discovery = FixedHosts({ray.util.get_node_ip_address(): 1})  # 2 CPUs free, 1 slot discovered
    executor = RayExecutor(settings, min_workers=1, max_workers=2, override_discovery=False, elastic_timeout=60)
    executor.start()
    try:
        assert executor.run(size_of_the_job) == [1]
    finally:
        executor.shutdown()
    settings.discovery = FixedHosts({'no-such-node': 2})
    executor = ElasticRayExecutor(ElasticSettings(settings.discovery, min_num_proc=1, max_num_proc=2,
                                                  elastic_timeout=1, reset_limit=None, start_timeout=60),
                                  override_discovery=False)
    executor.start()
    with pytest.raises(RuntimeError, match=r'waiting for 1 Horovod workers on Ray \(0 possible\).*host discovery'):
        executor.run(size_of_the_job)
    assert wait_for_free_cpus()
