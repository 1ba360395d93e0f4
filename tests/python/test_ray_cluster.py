"""horovod.ray on a two-node Ray cluster started here (``ray start --head`` and a second
``ray start --address``, both on this machine, one CPU each), driven through Ray Client
(``ray://``): one worker per node, so the job spans two Horovod hosts (TCP between them)."""

import os
import sys
import time

import pytest

ray = pytest.importorskip('ray')
from horovod.ray import RayExecutor  # noqa: E402

import ray_cluster_util  # noqa: E402
from ray_cluster_util import (check_elastic_job_survives_a_lost_worker, check_one_worker_per_host,  # noqa: E402
                              connect_client, free_port, ray_node, stop_nodes, wait_for_nodes, wait_for_port)

pytestmark = pytest.mark.timeout(300)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(ray_cluster_util)


@pytest.fixture(scope='module')
def two_node_client():
    assert not ray.is_initialized()
    gcs_port = free_port()
    client_port = gcs_port + 1
    nodes = [ray_node('--head', '--port={}'.format(gcs_port), '--ray-client-server-port={}'.format(client_port))]
    try:
        deadline = time.monotonic() + 120
        wait_for_port('127.0.0.1', client_port, nodes[0], deadline)
        nodes.append(ray_node('--address=127.0.0.1:{}'.format(gcs_port)))
        connect_client(ray, 'ray://127.0.0.1:{}'.format(client_port))
        wait_for_nodes(ray, 2, deadline)
        yield
    finally:
        ray.shutdown()
        stop_nodes(nodes)


def test_one_worker_per_node_through_ray_client(two_node_client):
    check_one_worker_per_host()


def test_callbacks_run_in_the_client_driver(two_node_client):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2)
    executor.start()
    seen = []
    try:
        def reporting():
            from horovod.ray import report
            for step in range(3):
                report({'step': step, 'rank': int(os.environ['HOROVOD_RANK'])})
            return 'done'

        assert executor.run(reporting, callbacks=[seen.append]) == ['done', 'done']
    finally:
        executor.shutdown()
    assert seen == [{'step': s, 'rank': 0} for s in range(3)]


def test_elastic_job_through_ray_client(two_node_client, tmp_path):
    """The elastic driver runs in an actor on the cluster; a worker dies and is replaced on the
    node it freed (both nodes share this machine's file system, hence the marker)."""
    check_elastic_job_survives_a_lost_worker(tmp_path, cross_size=2)


def test_elastic_callbacks_run_in_the_client_driver(two_node_client):
    """Elastic mode through Ray Client: the driver runs in an actor on the cluster, rank 0's
    reports come back to the callbacks here."""
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=2, max_workers=2)
    executor.start()
    seen = []
    try:
        def reporting():
            import horovod.torch as hvd
            from horovod.ray import report
            hvd.init()
            for step in range(3):
                report({'step': step, 'rank': hvd.rank()})
            return hvd.size()

        assert executor.run(reporting, callbacks=[seen.append]) == [2, 2]
    finally:
        executor.shutdown()
    assert seen == [{'step': s, 'rank': 0} for s in range(3)]
