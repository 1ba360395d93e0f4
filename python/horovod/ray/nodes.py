"""Which Ray nodes an elastic job may place new workers on, and how many each.

By default (no discovery, no cooldown) a new worker goes wherever Ray has room. Two settings
make the placement per node, each new actor pinned to its node (NodeAffinitySchedulingStrategy,
not soft):

* ``cooldown_range=(lo, hi)``: a node where a worker failed is left out for a while. The elastic
  driver (horovodrun's, bound from C++) blacklists it: its n-th blacklisting (n from 0) lasts
  ``clamp(lo * 2**n + U(0, 1) * lo, lo, hi)`` seconds, as with horovodrun's
  ``--blacklist-cooldown-range``; afterwards the node takes workers again.
* a host discovery (``override_discovery=False``): ``find_available_hosts_and_slots()`` names the
  nodes (by IP address, host name or Ray node id) and the workers each may run; nodes it does
  not name get none.

A node also needs the free CPUs (and GPUs) of a worker for each of its workers.
"""

import ray

__all__ = ['NodeRoom']


def _available_per_node():
    """{node id: {resource: free amount}} of the cluster."""
    from ray._private import state
    return state.available_resources_per_node()


class NodeRoom:
    """How many more workers (``cpus``, ``gpus`` each) each usable node can take now."""

    def __init__(self, cpus, gpus, blacklisted, discovery=None):
        """``blacklisted(node_id)``: whether the node takes no new worker now."""
        self.cpus = cpus
        self.gpus = gpus
        self.blacklisted = blacklisted
        self.discovery = discovery

    def _discovered(self, alive):
        """{node id: slots} of the nodes discovery names; names that match no live node count
        nothing (the node may not have joined yet)."""
        by_name = {}
        for node in alive:
            for name in (node['NodeID'], node.get('NodeManagerAddress'), node.get('NodeManagerHostname')):
                if name:
                    by_name[name] = node['NodeID']
        slots = {}
        for host, count in self.discovery.find_available_hosts_and_slots().items():
            node_id = by_name.get(host)
            if node_id is not None:
                slots[node_id] = slots.get(node_id, 0) + int(count)
        return slots

    def per_node(self, running):
        """{node id: workers it can take}, for ``running``: {node id: live workers there}."""
        alive = [n for n in ray.nodes() if n['Alive']]
        free = _available_per_node()
        room = {}
        for node in alive:
            node_id = node['NodeID']
            if self.blacklisted(node_id):
                continue
            resources = free.get(node_id, {})
            fits = int(resources.get('CPU', 0) // self.cpus)
            if self.gpus:
                fits = min(fits, int(resources.get('GPU', 0) // self.gpus))
            room[node_id] = fits
        if self.discovery is not None:
            slots = self._discovered(alive)
            room = {node_id: min(fits, max(0, slots[node_id] - running.get(node_id, 0)))
                    for node_id, fits in room.items() if node_id in slots}
        return {node_id: fits for node_id, fits in room.items() if fits > 0}

    @staticmethod
    def choose(room, count):
        """``count`` node ids from ``room`` (fullest first, each up to its room); fewer when the
        room ran out."""
        chosen = []
        for node_id, fits in sorted(room.items(), key=lambda item: -item[1]):
            take = min(fits, count - len(chosen))
            chosen += [node_id] * take
        return chosen
