"""``ElasticRayExecutor`` (deprecated in Horovod since 0.25): the old spelling of
``RayExecutor(min_workers=...)``, kept so that scripts written for it run."""

import warnings

from horovod.ray.runner import RayExecutor
from horovod.ray.settings import create_settings as _create_settings

__all__ = ['ElasticRayExecutor']


class ElasticRayExecutor:
    """Horovod's deprecated elastic executor, on RayExecutor's elastic mode."""

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, **kwargs):
        settings = _create_settings(timeout_s=timeout_s, ssh_identity_file=ssh_identity_file, nics=nics, **kwargs)
        settings.min_num_proc = min_num_proc
        settings.max_num_proc = max_num_proc
        settings.reset_limit = reset_limit
        settings.elastic_timeout = elastic_timeout
        return settings

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        warnings.warn('ElasticRayExecutor is deprecated; use RayExecutor(min_workers=...)', DeprecationWarning)
        if gpus_per_slot and not use_gpu:
            raise ValueError('gpus_per_slot is set, but use_gpu is False. use_gpu must be True if gpus_per_slot '
                             'is set.')
        if not hasattr(settings, 'min_num_proc'):
            raise ValueError('settings must come from ElasticRayExecutor.create_settings')
        self._env_vars = env_vars
        self._executor = RayExecutor(settings, min_workers=settings.min_num_proc, max_workers=settings.max_num_proc,
                                     reset_limit=settings.reset_limit, elastic_timeout=settings.elastic_timeout,
                                     cpus_per_worker=cpus_per_slot, use_gpu=use_gpu, gpus_per_worker=gpus_per_slot,
                                     override_discovery=override_discovery)

    def start(self):
        self._executor.start(extra_env_vars=self._env_vars)

    def run(self, worker_fn, callbacks=None):
        """``worker_fn()`` on every worker (it trains inside ``hvd.elastic.run``); the results of
        the final workers, in rank order."""
        try:
            return self._executor.run(worker_fn, callbacks=callbacks)
        finally:
            self._executor.shutdown()
