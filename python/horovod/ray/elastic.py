"""``ElasticRayExecutor`` (deprecated in Horovod since 0.25): kept so that imports work, and
every use says what is missing."""

import warnings

from horovod.ray.runner import ELASTIC_NOT_AVAILABLE

__all__ = ['ElasticRayExecutor']


class ElasticRayExecutor:
    """Horovod's deprecated elastic executor. Argument errors are Horovod's; anything that passes
    them raises RuntimeError: elastic training has not landed in this build."""

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, **kwargs):
        raise RuntimeError(ELASTIC_NOT_AVAILABLE.format(what='ElasticRayExecutor'))

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        warnings.warn('ElasticRayExecutor is deprecated; use RayExecutor(min_workers=...)', DeprecationWarning)
        if gpus_per_slot and not use_gpu:
            raise ValueError('gpus_per_slot is set, but use_gpu is False. use_gpu must be True if gpus_per_slot '
                             'is set.')
        raise RuntimeError(ELASTIC_NOT_AVAILABLE.format(what='ElasticRayExecutor'))
