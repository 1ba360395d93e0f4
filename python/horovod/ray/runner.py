"""``RayExecutor``: a Horovod job whose processes are Ray actors.

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=2)
    executor.start()
    results = executor.run(train_fn)      # train_fn calls hvd.init(); results in rank order
    executor.shutdown()

With ``min_workers`` the job is elastic (elastic_job.py): ``run(train_fn)`` where train_fn
trains inside ``hvd.elastic.run`` survives lost workers and grows back up to ``max_workers``.
"""

import ray

from horovod.ray.settings import create_settings
from horovod.ray.elastic_job import ElasticJob
from horovod.ray.static import StaticJob

__all__ = ['RayExecutor']

_REPORT_POLL_SECONDS = 0.1

_NOT_INITIALIZED = ('Ray is not initialized: call ray.init() (a local cluster) or ray.init(address=...) '
                    '(an existing cluster or "ray://host:10001" for Ray Client) before RayExecutor.start().')


class RayExecutor:
    """A Horovod job on Ray (spec: horovod.ray.RayExecutor), fixed-size or elastic.

    settings: from ``RayExecutor.create_settings``.
    num_workers: number of Horovod processes, packed onto as few nodes as possible; or
    num_hosts with num_workers_per_host: that many workers on each of that many distinct nodes.
    cpus_per_worker, use_gpu, gpus_per_worker (default 1 with use_gpu): each actor's resources.
    use_current_placement_group: inside a placement group (a Ray Tune trial), place the workers
        in it rather than reserving a new one.
    min_workers, max_workers, reset_limit, elastic_timeout: elastic mode (at least min_workers
        actors, up to max_workers, new ones wherever Ray has room; see elastic_job.py).
        elastic_timeout is ignored in a static job, as in Horovod.
    cooldown_range: (min, max) seconds; elastic mode: a node where a worker failed takes no new
        worker for a cooldown growing from min to max with each failure there (nodes.py). None:
        no node is left out (Ray owns node health).
    override_discovery: True (default): elastic mode finds nodes and slots from Ray's resources.
        False: from ``settings.discovery``, a horovod.runner.elastic.discovery.HostDiscovery
        naming nodes by IP address, host name or Ray node id, with their slots.

    Through Ray Client (``ray.init("ray://...")``) the job is driven from an actor on the
    cluster, so that the workers can reach its rendezvous server; ``callbacks`` still run in
    this process.
    """

    create_settings = staticmethod(create_settings)

    def __init__(self, settings, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_worker=1,
                 use_gpu=False, gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=600,
                 override_discovery=True):
        if max_workers is not None and (min_workers is None or min_workers <= 0):
            raise ValueError('max_workers requires a positive min_workers (elastic mode)')
        if min_workers is not None and num_workers is not None:
            raise ValueError('Both min_workers and num_workers provided: min_workers selects elastic mode, '
                             'num_workers a static job; give one of them')
        if min_workers is None and (reset_limit is not None or cooldown_range is not None):
            raise ValueError('reset_limit and cooldown_range apply to elastic mode: give min_workers')
        if min_workers is not None:
            discovery = None
            if not override_discovery:
                discovery = getattr(settings, 'discovery', None)
                if discovery is None or not hasattr(discovery, 'find_available_hosts_and_slots'):
                    raise ValueError('override_discovery=False: set settings.discovery to a HostDiscovery '
                                     '(horovod.runner.elastic.discovery) that names the nodes and their slots, '
                                     'got {!r}'.format(discovery))
            if cooldown_range is not None:
                if (not isinstance(cooldown_range, (tuple, list)) or len(cooldown_range) != 2
                        or not 0 < cooldown_range[0] <= cooldown_range[1]):
                    raise ValueError('cooldown_range must be (min, max) seconds with 0 < min <= max, got {!r}'
                                     .format(cooldown_range))
            if min_workers < 1:
                raise ValueError('min_workers must be at least 1, got {}'.format(min_workers))
            if max_workers is not None and max_workers < min_workers:
                raise ValueError('max_workers ({}) must not be below min_workers ({})'.format(max_workers, min_workers))
            if cpus_per_worker <= 0:
                raise ValueError('cpus_per_worker must be positive, got {}'.format(cpus_per_worker))
            if gpus_per_worker is not None and not use_gpu:
                raise ValueError('gpus_per_worker is set but use_gpu is False')
            self.settings = settings
            self.num_workers = None
            self._job_cls = ElasticJob
            self._job_args = (settings, min_workers, max_workers, cpus_per_worker, use_gpu, gpus_per_worker,
                              reset_limit, elastic_timeout, None, tuple(cooldown_range) if cooldown_range else None,
                              discovery)
            self._job = None
            self._remote = None
            return
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError('gpus_per_worker is set but use_gpu is False')
        if num_hosts is not None:
            if num_workers is not None:
                raise ValueError('Give either num_workers or num_hosts (with num_workers_per_host), not both')
            if num_hosts < 1 or num_workers_per_host < 1:
                raise ValueError('num_hosts and num_workers_per_host must be at least 1')
            num_workers = num_hosts * num_workers_per_host
        elif num_workers is None:
            raise ValueError('Give num_workers, or num_hosts and num_workers_per_host')
        if num_workers < 1:
            raise ValueError('num_workers must be at least 1, got {}'.format(num_workers))
        if cpus_per_worker <= 0:
            raise ValueError('cpus_per_worker must be positive, got {}'.format(cpus_per_worker))
        self.settings = settings
        self.num_workers = num_workers
        self._job_cls = StaticJob
        self._job_args = (settings, num_workers, num_hosts, num_workers_per_host, cpus_per_worker, use_gpu,
                          gpus_per_worker, use_current_placement_group)
        self._job = None      # StaticJob in this process, or
        self._remote = None   # an actor holding one (Ray Client)

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Reserves the resources, starts the actors, gives them their Horovod environment and
        instantiates ``executable_cls(*executable_args, **executable_kwargs)`` in each."""
        if not ray.is_initialized():
            raise RuntimeError(_NOT_INITIALIZED)
        if self._job is not None or self._remote is not None:
            raise RuntimeError('RayExecutor.start() was already called; call shutdown() first')
        args = (executable_cls, executable_args, executable_kwargs, extra_env_vars)
        if _is_ray_client():
            self._remote = ray.remote(num_cpus=0)(self._job_cls).remote(*self._job_args)
            try:
                ray.get(self._remote.start.remote(*args))
            except BaseException:
                self.shutdown()
                raise
        else:
            self._job = self._job_cls(*self._job_args)
            self._job.start(*args)

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """``fn(*args, **kwargs)`` on every worker; the return values in rank order. ``callbacks``
        are called on the driver with each value that rank 0 passes to ``horovod.ray.report``."""
        return self._call('run', fn, args, kwargs, callbacks)

    def execute(self, fn, callbacks=None):
        """``fn(executable)`` on every worker (the object built by start()); rank order."""
        return self._call('execute', fn, callbacks)

    def execute_single(self, fn):
        """``fn(executable)`` on rank 0 only; its return value."""
        return self._call('execute_single', fn)

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts ``fn(*args, **kwargs)`` on every worker and returns the ObjectRefs (rank order)
        without waiting. Failures surface when the refs are got; the job is not stopped for them."""
        return self._call('run_remote', fn, args, kwargs)

    def shutdown(self):
        """Stops the workers and frees their resources. Idempotent."""
        if self._job is not None:
            self._job.shutdown()
            self._job = None
        if self._remote is not None:
            try:
                ray.get(self._remote.shutdown.remote())
            finally:
                ray.kill(self._remote)
                self._remote = None

    def _call(self, method, *args):
        if self._job is not None:
            return getattr(self._job, method)(*args)
        if self._remote is not None:
            callbacks = args[3] if method == 'run' else args[1] if method == 'execute' else None
            if not callbacks:
                return ray.get(getattr(self._remote, method).remote(*args))
            return self._call_reporting(method, args, callbacks)
        raise RuntimeError('RayExecutor has no workers: call start() first')

    def _call_reporting(self, method, args, callbacks):
        """Through Ray Client: the job runs in an actor on the cluster, and ``callbacks`` here.
        The workers put rank 0's reports into a queue (an actor) that this driver drains."""
        from ray.util.queue import Queue
        from horovod.ray.static import _drain
        queue = Queue(actor_options={'num_cpus': 0})
        try:
            args = args[:3] + (None,) if method == 'run' else args[:1] + (None,)
            ref = getattr(self._remote, method).remote(*args, report_queue=queue)
            while not ray.wait([ref], timeout=_REPORT_POLL_SECONDS)[0]:
                _drain(queue, callbacks)
            _drain(queue, callbacks)  # a worker's put() returns before its function does
            return ray.get(ref)
        finally:
            queue.shutdown()


def _is_ray_client():
    try:
        from ray.util.client import ray as client_ray
        return client_ray.is_connected()
    except ImportError:
        return False
