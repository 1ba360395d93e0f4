"""``ElasticRayExecutor`` (deprecated in Horovod since 0.25): the old spelling of
``RayExecutor(min_workers=...)``, kept so that scripts written for it run."""

import warnings

from horovod.ray.runner import RayExecutor
from horovod.ray.settings import RaySettings
from horovod.runner.elastic.settings import ElasticSettings

__all__ = ['ElasticRayExecutor']


class ElasticRayExecutor:
    """Horovod's deprecated elastic executor, on RayExecutor's elastic mode.

    settings: from ``ElasticRayExecutor.create_settings``, or any
        ``horovod.runner.elastic.settings.ElasticSettings`` (min_num_proc, max_num_proc,
        reset_limit, elastic_timeout, cooldown_range, nics, start_timeout, discovery).
    use_gpu, cpus_per_slot, gpus_per_slot: each worker's resources.
    env_vars: extra variables for every worker.
    override_discovery: True: nodes and slots come from Ray's resources; False: from
        ``settings.discovery`` (a HostDiscovery naming nodes by IP address, host name or node id).
    """

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, min_np=None, max_np=None, **kwargs):
        """An ElasticSettings for this executor; ``discovery`` is None until set (it is only
        read with ``override_discovery=False``). ``min_np`` / ``max_np``: deprecated spellings of
        ``min_num_proc`` / ``max_num_proc``. Other keywords are ElasticSettings'."""
        if min_np is not None:
            warnings.warn('min_np is deprecated, use min_num_proc instead', DeprecationWarning)
            min_num_proc = min_np
        if max_np is not None:
            warnings.warn('max_np is deprecated, use max_num_proc instead', DeprecationWarning)
            max_num_proc = max_np
        RaySettings(timeout_s=timeout_s, nics=nics)  # checks them
        settings = ElasticSettings(discovery=None, min_num_proc=min_num_proc, max_num_proc=max_num_proc,
                                   elastic_timeout=elastic_timeout, reset_limit=reset_limit,
                                   ssh_identity_file=ssh_identity_file, nics=nics, start_timeout=timeout_s, **kwargs)
        settings.timeout_s = timeout_s
        return settings

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        warnings.warn('ElasticRayExecutor is deprecated; use RayExecutor(min_workers=...)', DeprecationWarning)
        if gpus_per_slot and not use_gpu:
            raise ValueError('gpus_per_slot is set, but use_gpu is False. use_gpu must be True if gpus_per_slot '
                             'is set.')
        if not hasattr(settings, 'min_num_proc'):
            raise ValueError('settings must come from ElasticRayExecutor.create_settings (or be an ElasticSettings)')
        timeout_s = getattr(settings, 'timeout_s', None)
        if timeout_s is None:
            timeout_s = settings.start_timeout_seconds(30) if hasattr(settings, 'start_timeout_seconds') else 30
        ray_settings = RaySettings(timeout_s=timeout_s, nics=getattr(settings, 'nics', None),
                                   ssh_identity_file=getattr(settings, 'ssh_identity_file', None))
        ray_settings.discovery = getattr(settings, 'discovery', None)
        self._env_vars = env_vars
        self._executor = RayExecutor(ray_settings, min_workers=settings.min_num_proc,
                                     max_workers=settings.max_num_proc, reset_limit=settings.reset_limit,
                                     cooldown_range=getattr(settings, 'cooldown_range', None),
                                     elastic_timeout=settings.elastic_timeout, cpus_per_worker=cpus_per_slot,
                                     use_gpu=use_gpu, gpus_per_worker=gpus_per_slot,
                                     override_discovery=override_discovery)

    def start(self):
        self._executor.start(extra_env_vars=self._env_vars)

    def run(self, worker_fn, callbacks=None):
        """``worker_fn()`` on every worker (it trains inside ``hvd.elastic.run``); the results of
        the final workers, in rank order. ``callbacks`` get what rank 0 passes to
        ``horovod.ray.report``."""
        try:
            return self._executor.run(worker_fn, callbacks=callbacks)
        finally:
            self._executor.shutdown()
