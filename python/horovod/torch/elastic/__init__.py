"""Elastic training for PyTorch: ``hvd.elastic.run``, ``TorchState``, ``ElasticSampler``."""

from horovod.common.elastic import run_fn
from horovod.torch.elastic.sampler import ElasticSampler  # noqa: F401
from horovod.torch.elastic.state import TorchState  # noqa: F401
from horovod.torch.async_ops import init, shutdown


def run(func):
    """Decorator for elastic training: ``func(state, *args, **kwargs)`` is retried after a
    failure (state restored to the last commit, Horovod re-initialized, state synced from rank
    0) and after host changes (re-initialized without rollback)."""
    return run_fn(func, _reset)


def _reset():
    shutdown()
    init()
