"""horovod.ray on a two-node Ray cluster whose nodes are two hosts with their own addresses: the
head in this machine's network namespace on a bridge address, the second node in another network
namespace joined to the bridge by a veth pair. The driver joins the cluster directly (the GCS
address, not Ray Client). One worker per node: the job spans two Horovod hosts over TCP, and
each worker really runs in its node's namespace. Then what only two nodes show: the executor's
calls and the worker actors' methods on both nodes, an elastic job losing a worker, and node
blacklisting (cooldown_range) moving a replacement to the other node. Needs root and iproute2;
skipped otherwise."""

import os
import shutil
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip('ray')

from ray.util.queue import Queue  # noqa: E402

from horovod.ray import RayExecutor, report  # noqa: E402
from horovod.runner.elastic.discovery import HostDiscovery  # noqa: E402

import ray_cluster_util  # noqa: E402
from ray_cluster_util import (check_elastic_job_survives_a_lost_worker, check_one_worker_per_host,  # noqa: E402
                              elastic_train, free_port, ray_node, stop_nodes, wait_for_free_cpus, wait_for_nodes,
                              wait_for_port)

pytestmark = pytest.mark.timeout(300)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(ray_cluster_util)


def ip(*args):
    subprocess.run(['ip'] + list(args), check=True, capture_output=True, timeout=30)


def free_subnet():
    """A /24 under 10.79.0.0/16 that no interface of this machine uses yet, as '10.79.N'."""
    used = subprocess.run(['ip', '-4', 'addr', 'show'], capture_output=True, text=True).stdout
    for n in range(1, 250):
        if 'inet 10.79.{}.'.format(n) not in used:
            return '10.79.{}'.format(n)
    pytest.skip('no free 10.79.x.0/24 subnet')


@pytest.fixture(scope='module')
def namespace_host():
    """A network namespace reachable from this one at <subnet>.2, this side being <subnet>.1."""
    if os.geteuid() != 0 or shutil.which('ip') is None:
        pytest.skip('needs root and iproute2 (network namespaces)')
    tag = os.getpid() % 100000
    bridge, ns, veth, peer = 'hrb{}'.format(tag), 'hvdray{}'.format(tag), 'hrv{}'.format(tag), 'hrp{}'.format(tag)
    net = free_subnet()
    try:
        ip('netns', 'add', ns)
    except subprocess.CalledProcessError:
        pytest.skip('cannot create network namespaces here')
    try:
        ip('link', 'add', bridge, 'type', 'bridge')
        ip('addr', 'add', net + '.1/24', 'dev', bridge)
        ip('link', 'set', bridge, 'up')
        ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', peer)
        ip('link', 'set', peer, 'netns', ns)
        ip('link', 'set', veth, 'master', bridge, 'up')
        ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up')
        ip('netns', 'exec', ns, 'ip', 'addr', 'add', net + '.2/24', 'dev', peer)
        ip('netns', 'exec', ns, 'ip', 'link', 'set', peer, 'up')
        yield ns, net
    finally:
        for pid in subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(pid), 9)  # a leftover of the test
            except OSError:
                pass
        subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
        subprocess.run(['ip', 'link', 'del', bridge], capture_output=True)


@pytest.fixture(scope='module')
def two_host_cluster(namespace_host):
    ns, net = namespace_host
    head_ip, other_ip = net + '.1', net + '.2'
    assert not ray.is_initialized()
    gcs_port = free_port(head_ip)
    nodes = [ray_node('--head', '--node-ip-address=' + head_ip, '--port={}'.format(gcs_port))]
    try:
        deadline = time.monotonic() + 120
        wait_for_port(head_ip, gcs_port, nodes[0], deadline)
        nodes.append(ray_node('--address={}:{}'.format(head_ip, gcs_port), '--node-ip-address=' + other_ip,
                              prefix=['ip', 'netns', 'exec', ns]))
        ray.init(address='{}:{}'.format(head_ip, gcs_port), _node_ip_address=head_ip, log_to_driver=False)
        wait_for_nodes(ray, 2, deadline)
        yield head_ip, other_ip
    finally:
        ray.shutdown()
        stop_nodes(nodes)


def test_one_worker_per_host(two_host_cluster):
    head_ip, other_ip = two_host_cluster
    results = check_one_worker_per_host()
    for rank, seen in enumerate(results):
        print('rank {}: host {} (network namespace {}), cross rank {} of {}, allreduce {}, allgather {}'.format(
            rank, seen['host'], seen['netns'], seen['cross_rank'], seen['cross_size'], seen['total'], seen['gathered']))
    # One rank on each host (either order: ranks follow the node of the first actor to start),
    # each in its host's network namespace.
    by_host = {seen['host']: seen['netns'] for seen in results}
    assert sorted(by_host) == sorted([head_ip, other_ip])
    assert by_host[head_ip] == os.readlink('/proc/self/ns/net') != by_host[other_ip]


def test_elastic_job_loses_a_worker(two_host_cluster, tmp_path):
    """Rank 1 dies; the elastic driver starts a new worker on the host it freed and the job
    finishes on both hosts from the last commit."""
    check_elastic_job_survives_a_lost_worker(tmp_path, cross_size=2)


def node_ids_by_address():
    return {node['NodeManagerAddress']: node['NodeID'] for node in ray.nodes() if node['Alive']}


class Whereabouts:
    """The executable of the tests below: where its worker runs, and elastic_train."""

    def __init__(self, marker=None, dies_on_host=None):
        self.marker = marker
        self.dies_on_host = dies_on_host

    def where(self):
        return os.environ['HOROVOD_HOSTNAME'], ray.get_runtime_context().get_node_id()

    def train(self):
        report('start')
        rank, size, seen, weights = elastic_train(self.marker, self.dies_on_host)
        report('done')
        return self.where(), rank, size, seen, weights


def test_execute_callbacks_and_worker_methods_on_both_hosts(two_host_cluster):
    head_ip, other_ip = two_host_cluster
    assert wait_for_free_cpus()
    queue = Queue(actor_options={'num_cpus': 0})
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_hosts=2, num_workers_per_host=1)
    seen = []
    try:
        executor.start(executable_cls=Whereabouts)
        where = executor.execute(lambda whereabouts: whereabouts.where())
        workers = executor._job.workers
        node_ids = ray.get([worker.node_id.remote() for worker in workers])
        gpu_ids = ray.get([worker.get_gpu_ids.remote() for worker in workers])

        def report_host():
            report(os.environ['HOROVOD_HOSTNAME'])
            return os.environ['HOROVOD_HOSTNAME']

        hosts = executor.run(report_host, callbacks=[seen.append])
        ray.get([worker.set_queue.remote(queue) for worker in workers])
        assert executor.run(report_host) == hosts  # no callbacks: reports go to the set queue
        queued = queue.get_nowait_batch(queue.qsize())
    finally:
        executor.shutdown()
        queue.shutdown()
    node_of = node_ids_by_address()
    assert sorted(host for host, _ in where) == sorted([head_ip, other_ip])
    assert [node for _, node in where] == node_ids == [node_of[host] for host, _ in where]
    assert node_ids[0] != node_ids[1]
    assert gpu_ids == [[], []]
    assert [host for host, _ in where] == hosts
    assert seen == queued == [hosts[0]]  # rank 0's report only, whichever host it is on


class SlotsOnceDead(HostDiscovery):
    """A host discovery that answers ``before`` until the marker file exists, then ``after``."""

    def __init__(self, marker, before, after):
        self.marker, self.before, self.after = marker, before, after

    def find_available_hosts_and_slots(self):
        return dict(self.after if os.path.exists(self.marker) else self.before)


def test_cooldown_moves_the_replacement_to_the_other_host(two_host_cluster, tmp_path):
    """With a cooldown range, the worker lost on host B is replaced on host A although B has room;
    B stays out of later runs until its cooldown ends, then takes workers again.

    Half a CPU per worker: each host has room for 2. The discovery offers one slot per host for
    the first round (one worker on each), two once the worker on B died. The cooldown lasts
    600 s on the blacklist's clock, which the test moves past it between runs (an event, not a
    wait; the blacklist is the elastic driver's, kept by the executor across runs)."""
    head_ip, other_ip = two_host_cluster
    node_of = node_ids_by_address()
    assert wait_for_free_cpus()
    died = tmp_path / 'died'
    settings = RayExecutor.create_settings(timeout_s=120)
    settings.discovery = SlotsOnceDead(str(died), {head_ip: 1, other_ip: 1}, {head_ip: 2, other_ip: 2})
    executor = RayExecutor(settings, min_workers=1, max_workers=2, cpus_per_worker=0.5, elastic_timeout=60,
                           cooldown_range=(600, 600), override_discovery=False)
    executor.start(executable_cls=Whereabouts, executable_args=[str(died), other_ip])
    seen = []
    try:
        results = executor.execute(lambda whereabouts: whereabouts.train(), callbacks=[seen.append])
        log = [what for _, what in executor._job.log]
        assert wait_for_free_cpus()  # the run's workers are gone
        settings.discovery.after = {head_ip: 1, other_ip: 1}
        while_cooling = executor.execute(lambda whereabouts: whereabouts.where())
        assert wait_for_free_cpus()
        executor._job.blacklist.advance_clock(601)
        after_cooldown = executor.execute(lambda whereabouts: whereabouts.where())
    finally:
        executor.shutdown()
    assert died.read_text() == other_ip
    # Whoever sees the death first names the reason: the pool (the worker's exit) or the survivor
    # (its peer stopped answering); either way host B is blacklisted for the cooldown.
    assert any('blacklisting host {} ({}) for 600.0 s'.format(node_of[other_ip], why) in log
               for why in ('a worker failed there', 'a worker there stopped answering')), log
    # The survivor trained every epoch (rank 0 or 1 in the first round: ranks follow the node
    # of the first actor to start); the replacement joined at epoch 3, on the head's host.
    assert [(where, rank, size) for where, rank, size, _, _ in results] == [
        ((head_ip, node_of[head_ip]), 0, 2), ((head_ip, node_of[head_ip]), 1, 2)]
    first_rank = results[0][3][0][1]
    assert [(e, r, s) for e, r, s, _ in results[0][3]] == [(e, first_rank, 2) for e in range(3)] + [(3, 0, 2),
                                                                                                   (4, 0, 2)]
    assert [(e, r, s) for e, r, s, _ in results[1][3]] == [(3, 1, 2), (4, 1, 2)]
    assert results[0][4] == results[1][4]
    assert seen == ['start', 'done']
    assert while_cooling == [(head_ip, node_of[head_ip])]  # B is still cooling down: one slot left
    assert sorted(after_cooldown) == sorted([(head_ip, node_of[head_ip]), (other_ip, node_of[other_ip])])
