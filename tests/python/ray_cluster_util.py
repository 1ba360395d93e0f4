"""What the Ray test files share: Ray nodes started as processes, and the elastic training
function their jobs run. The test files register this module for pickling by value, since Ray's
workers cannot import it."""

import os
import socket
import subprocess
import sys
import time


def free_port(host='127.0.0.1'):
    """A free port on ``host`` outside Ray's default worker port range (10002-19999)."""
    for port in range(25000, 30000):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError('no free port in 25000-29999')


def ray_node(*args, prefix=()):
    """A `ray start --block` process with one CPU (``prefix``: a command to run it under, such as
    ``ip netns exec NS``); terminating it stops the node's Ray processes."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), 'ray')
    head_only = ['--include-dashboard=false'] if '--head' in args else []
    command = (list(prefix) + [ray_cli, 'start', '--block', '--num-cpus=1', '--disable-usage-stats'] + head_only
               + list(args))
    return subprocess.Popen(command, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_for_port(host, port, node, deadline):
    """Waits until ``host:port`` accepts connections; fails if ``node`` exits first or time is up."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline or node.poll() is not None:
                raise RuntimeError('the Ray head node did not come up on {}:{}'.format(host, port))
            time.sleep(1)


def wait_for_nodes(ray, count, deadline):
    while len([n for n in ray.nodes() if n['Alive']]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError('only {} of {} Ray nodes joined'.format(
                len([n for n in ray.nodes() if n['Alive']]), count))
        time.sleep(1)


def connect_client(ray, address, attempts=3):
    """``ray.init('ray://...')``, retried when Ray's proxier loses the per-client server it forks:
    beside a CPU hog that child can die before its exec (its .err log: gRPC's ``epoll_wait error:
    Bad file descriptor``, the fds closed under a gRPC thread), and the proxier then fails the
    connection with ``psutil.ZombieProcess``. A Ray race, not Horovod's; a new client id gets a
    new server."""
    for attempt in range(attempts):
        try:
            ray.init(address)
            return
        except ConnectionAbortedError:
            ray.shutdown()
            if attempt + 1 == attempts:
                raise


def stop_nodes(nodes):
    for node in reversed(nodes):
        node.terminate()
    for node in nodes:
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, 9)


def elastic_train(marker, dies_on_host=None):
    """Trains 5 epochs inside hvd.elastic.run; rank 1 of the first round (with ``dies_on_host``:
    the worker whose HOROVOD_HOSTNAME it is) dies in epoch 2 (the marker file, on the file system
    every node shares, says it already did; it holds the host the worker died on). Returns rank,
    size, (epoch, rank, size, cross_size) per step, and the weights' sum."""
    import os
    import torch
    import horovod.torch as hvd
    hvd.init()
    torch.manual_seed(0)
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
            host = os.environ['HOROVOD_HOSTNAME']
            dies = hvd.rank() == 1 if dies_on_host is None else host == dies_on_host
            if state.epoch == 2 and dies and not os.path.exists(marker):
                with open(marker, 'w') as f:
                    f.write(host)
                os._exit(1)
            state.epoch += 1
            state.commit()

    train(state)
    return hvd.rank(), hvd.size(), seen, float(model.weight.detach().sum())


def wait_for_free_cpus(seconds=30):
    """True once every CPU of the cluster is free (Ray releases a finished job's actors and
    placement group asynchronously)."""
    import ray
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ray.available_resources().get('CPU', 0) == ray.cluster_resources().get('CPU', -1):
            return True
        time.sleep(0.2)
    return False


def check_elastic_job_survives_a_lost_worker(marker_dir, cross_size):
    """Runs elastic_train on 1-2 workers and checks that the survivor trained every epoch, the
    replacement joined at the rollback to epoch 3's commit, both ended with rank 0's state, and
    their resources were free once run() returned.
    The first round takes the CPUs free when it forms (at least 1): they must all be free."""
    from horovod.ray import RayExecutor
    assert wait_for_free_cpus()
    executor = RayExecutor(
        # A replacement actor starts from nothing (imports torch): on a loaded 2-CPU machine that
        # took over 30 s, longer than the survivor's rendezvous timeout (timeout_s).
        RayExecutor.create_settings(timeout_s=120), min_workers=1, max_workers=2, elastic_timeout=60)
    executor.start()
    try:
        results = executor.run(elastic_train, args=[str(marker_dir / 'died')])
        freed = wait_for_free_cpus()  # run() ends its workers, before shutdown()
    finally:
        executor.shutdown()
    assert freed
    assert (marker_dir / 'died').exists()
    assert [(rank, size) for rank, size, _, _ in results] == [(0, 2), (1, 2)]
    assert results[0][2] == [(e, 0, 2, cross_size) for e in range(5)]
    assert results[1][2] == [(3, 1, 2, cross_size), (4, 1, 2, cross_size)]
    assert results[0][3] == results[1][3]


def where_am_i():
    """A Horovod worker's view of the job after a small and a 4 MiB allreduce and an allgather."""
    import os
    import torch
    import horovod.torch as hvd
    hvd.init()
    big = hvd.allreduce(torch.ones(1 << 20) * (hvd.rank() + 1), op=hvd.Sum)
    return dict(total=hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item(),
                gathered=hvd.allgather(torch.full((hvd.rank() + 1,), float(hvd.rank()))).tolist(),
                big=(float(big.min()), float(big.max())),
                local_size=hvd.local_size(), cross_size=hvd.cross_size(), cross_rank=hvd.cross_rank(),
                host=os.environ['HOROVOD_HOSTNAME'], netns=os.readlink('/proc/self/ns/net'))


def check_one_worker_per_host():
    """Two workers on two Ray nodes: one per Horovod host, collectives across them correct.
    Returns the workers' where_am_i() in rank order."""
    from horovod.ray import RayExecutor
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_hosts=2, num_workers_per_host=1)
    executor.start()
    try:
        results = executor.run(where_am_i)
    finally:
        executor.shutdown()
    for rank, seen in enumerate(results):
        assert (seen['total'], seen['gathered'], seen['big']) == (3.0, [0.0, 1.0, 1.0], (3.0, 3.0))
        assert (seen['local_size'], seen['cross_size'], seen['cross_rank']) == (1, 2, rank)
    assert results[0]['host'] != results[1]['host']
    return results
