"""Reserving the workers' resources with a Ray placement group."""

import ray
from ray.util.placement_group import get_current_placement_group, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

__all__ = ['WorkerPlacement']


class WorkerPlacement:
    """Where each of ``num_workers`` actors goes.

    ``num_hosts`` given: one bundle per host holding ``workers_per_host`` workers, spread over
    distinct nodes (STRICT_SPREAD). Otherwise one bundle per worker, packed onto as few nodes as
    possible (PACK). ``use_current`` and a current placement group (e.g. inside a Ray Tune trial):
    the workers go into that group's bundles instead, and it is not removed at release().
    """

    def __init__(self, num_workers, num_hosts, workers_per_host, cpus_per_worker, gpus_per_worker, use_current,
                 timeout_s):
        self.num_workers = num_workers
        self.workers_per_host = workers_per_host if num_hosts else 1
        worker_resources = {'CPU': cpus_per_worker}
        if gpus_per_worker:
            worker_resources['GPU'] = gpus_per_worker
        current = get_current_placement_group() if use_current else None
        self.owned = current is None
        if current is not None:
            self.group = current
            return
        bundle = {k: v * self.workers_per_host for k, v in worker_resources.items()}
        count = num_hosts if num_hosts else num_workers
        strategy = 'STRICT_SPREAD' if num_hosts else 'PACK'
        self.group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy)
        try:
            ray.get(self.group.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.release()
            raise RuntimeError(
                'Could not reserve resources for {n} Horovod workers ({count} bundles of {bundle}, strategy '
                '{strategy}) within placement_group_timeout_s={t}s. The cluster has {total} in total and {free} '
                'free. Ask for fewer workers or CPUs per worker, or add nodes.'.format(
                    n=num_workers, count=count, bundle=bundle, strategy=strategy, t=timeout_s,
                    total=_cpu_gpu(ray.cluster_resources()), free=_cpu_gpu(ray.available_resources()))) from None

    def strategy(self, worker_index):
        """The scheduling strategy of worker ``worker_index``."""
        bundle = -1 if not self.owned else worker_index // self.workers_per_host
        return PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=bundle,
                                                placement_group_capture_child_tasks=False)

    def release(self):
        """Removes the placement group if we created it (its actors die with it). Idempotent."""
        if self.owned and self.group is not None:
            try:
                remove_placement_group(self.group)
            except Exception:  # already gone (cluster shut down)
                pass
        self.group = None


def _cpu_gpu(resources):
    return {k: resources[k] for k in ('CPU', 'GPU') if k in resources} or resources
