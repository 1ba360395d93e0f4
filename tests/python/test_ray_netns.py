"""horovod.ray on a two-node Ray cluster whose nodes are two hosts with their own addresses: the
head in this machine's network namespace on a bridge address, the second node in another network
namespace joined to the bridge by a veth pair. The driver joins the cluster directly (the GCS
address, not Ray Client). One worker per node: the job spans two Horovod hosts over TCP, and
each worker really runs in its node's namespace. Needs root and iproute2; skipped otherwise."""

import os
import shutil
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip('ray')

import ray_cluster_util  # noqa: E402
from ray_cluster_util import (check_elastic_job_survives_a_lost_worker, check_one_worker_per_host,  # noqa: E402
                              free_port, ray_node, stop_nodes, wait_for_nodes, wait_for_port)

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
