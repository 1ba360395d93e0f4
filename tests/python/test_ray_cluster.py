"""horovod.ray on a two-node Ray cluster started here (``ray start --head`` and a second
``ray start --address``, both on this machine, one CPU each), driven through Ray Client
(``ray://``): one worker per node, so the job spans two Horovod hosts (TCP between them)."""

import os
import socket
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip('ray')
from horovod.ray import RayExecutor  # noqa: E402

pytestmark = pytest.mark.timeout(300)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def free_port():
    """A free port outside Ray's default worker port range (10002-19999)."""
    for port in range(25000, 30000):
        with socket.socket() as s:
            try:
                s.bind(('127.0.0.1', port))
            except OSError:
                continue
            return port
    raise RuntimeError('no free port in 25000-29999')


def ray_node(*args):
    """A `ray start --block` process; terminating it stops the node's Ray processes."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), 'ray')
    head_only = ['--include-dashboard=false'] if '--head' in args else []
    command = [ray_cli, 'start', '--block', '--num-cpus=1', '--disable-usage-stats'] + head_only + list(args)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture(scope='module')
def two_node_client():
    assert not ray.is_initialized()
    gcs_port = free_port()
    client_port = gcs_port + 1
    nodes = [ray_node('--head', '--port={}'.format(gcs_port), '--ray-client-server-port={}'.format(client_port))]
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(('127.0.0.1', client_port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or nodes[0].poll() is not None:
                    raise RuntimeError('the Ray head node did not come up')
                time.sleep(1)
        nodes.append(ray_node('--address=127.0.0.1:{}'.format(gcs_port)))
        ray.init('ray://127.0.0.1:{}'.format(client_port))
        while len([n for n in ray.nodes() if n['Alive']]) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError('the second Ray node did not join')
            time.sleep(1)
        yield
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            node.terminate()
        for node in nodes:
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, 9)


def test_one_worker_per_node_through_ray_client(two_node_client):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_hosts=2, num_workers_per_host=1)
    executor.start()
    try:
        def fn():
            import torch
            import horovod.torch as hvd
            hvd.init()
            total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item()
            return total, hvd.local_size(), hvd.cross_size(), hvd.cross_rank()

        assert executor.run(fn) == [(3.0, 1, 2, 0), (3.0, 1, 2, 1)]
    finally:
        executor.shutdown()


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


def elastic_train(marker):
    """5 epochs inside hvd.elastic.run; rank 1 of the first round dies in epoch 2."""
    import os
    import torch
    import horovod.torch as hvd
    hvd.init()
    model = torch.nn.Linear(2, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    seen = []

    @hvd.elastic.run
    def train(state):
        while state.epoch < 5:
            loss = model(torch.ones(4, 2) * (hvd.rank() + 1)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append((state.epoch, hvd.rank(), hvd.size(), hvd.cross_size()))
            if state.epoch == 2 and hvd.rank() == 1 and not os.path.exists(marker):
                open(marker, 'w').close()
                os._exit(1)
            state.epoch += 1
            state.commit()

    train(state)
    return seen


def test_elastic_job_through_ray_client(two_node_client, tmp_path):
    """The elastic driver runs in an actor on the cluster; a worker dies and is replaced on the
    node it freed (both nodes share this machine's file system, hence the marker)."""
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), min_workers=1, max_workers=2,
                           elastic_timeout=60)
    executor.start()
    try:
        results = executor.run(elastic_train, args=[str(tmp_path / 'died')])
    finally:
        executor.shutdown()
    assert (tmp_path / 'died').exists()
    assert results[0] == [(e, 0, 2, 2) for e in range(5)]
    assert results[1] == [(3, 1, 2, 2), (4, 1, 2, 2)]
