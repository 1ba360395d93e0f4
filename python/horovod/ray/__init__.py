"""Horovod on Ray: ``RayExecutor`` runs a Horovod job whose processes are Ray actors.

See docs/ray.md; ``RayExecutor(min_workers=...)`` (or the deprecated ``ElasticRayExecutor``) runs an
elastic job that survives lost workers.
"""

try:
    import ray  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError('horovod.ray needs Ray: pip install "ray==2.58.0"') from e

from horovod.ray.elastic import ElasticRayExecutor
from horovod.ray.runner import RayExecutor
from horovod.ray.worker import BaseHorovodWorker, report

__all__ = ['RayExecutor', 'BaseHorovodWorker', 'ElasticRayExecutor', 'report']
