"""``BaseHorovodWorker``: the Ray actor that hosts one Horovod process. ``RayExecutor`` creates
one per worker, gives it its ``HOROVOD_*`` environment, and calls the user's functions on it."""

import os
import socket

from horovod.runner.error_text import keep_causes

__all__ = ['BaseHorovodWorker', 'report']

# The values rank 0 reports during RayExecutor.run(..., callbacks=...) go to this Ray queue
# (set by the executor for the duration of the run; None otherwise).
_report_queue = None


# The queue set_queue() gave this actor, used when a call brings none.
_actor_queue = None


def _is_rank_zero():
    """Rank 0 of the current round while Horovod is initialized (an elastic job's ranks change
    from round to round), else the rank the worker was started with."""
    try:
        from horovod import _core
        if _core.is_initialized():
            return _core.rank() == 0
    except ImportError:
        pass
    return os.environ.get('HOROVOD_RANK') == '0'


def report(value):
    """Sends ``value`` to the ``callbacks`` of the running ``RayExecutor.run`` / ``execute``
    (each callback is called with it on the driver). Only rank 0's values are delivered; on the
    other ranks, and when the run has no callbacks, this does nothing."""
    queue = _report_queue if _report_queue is not None else _actor_queue
    if queue is not None and _is_rank_zero():
        queue.put(value)


class BaseHorovodWorker:
    """One Horovod process. Methods are called by RayExecutor, not by users."""

    def __init__(self, world_rank=0, world_size=1):
        self.world_rank = world_rank
        self.world_size = world_size
        self.executable = None

    def node_info(self):
        """(node id, node IP, host name, GPU ids) of the node this actor runs on."""
        import ray
        context = ray.get_runtime_context()
        return (context.get_node_id(), ray.util.get_node_ip_address(), socket.gethostname(),
                [str(g) for g in ray.get_gpu_ids()])

    def hostname(self):
        return socket.gethostname()

    def get_gpu_ids(self):
        """The ids of the GPUs Ray gave this actor (empty without GPUs)."""
        import ray
        return ray.get_gpu_ids()

    def node_id(self):
        """The id (hex) of the Ray node this actor runs on."""
        import ray
        return ray.get_runtime_context().get_node_id()

    def set_queue(self, queue):
        """Makes ``queue`` (a ``ray.util.queue.Queue``) where ``horovod.ray.report`` puts rank 0's
        values during calls that bring no queue of their own (those without callbacks)."""
        global _actor_queue
        _actor_queue = queue

    def update_env_vars(self, env_vars):
        """Sets the environment (before Horovod is initialized in this process)."""
        os.environ.update({k: str(v) for k, v in env_vars.items()})
        self.world_rank = int(os.environ.get('HOROVOD_RANK', self.world_rank))
        self.world_size = int(os.environ.get('HOROVOD_SIZE', self.world_size))

    def env_vars(self):
        return dict(os.environ)

    def start_executable(self, executable_cls=None, executable_args=None, executable_kwargs=None):
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or []), **(executable_kwargs or {}))

    def execute(self, func, queue=None):
        """``func(executable)``; the executable is None when start() was given no class."""
        return self._with_queue(queue, func, self.executable)

    def run(self, func, args=None, kwargs=None, queue=None):
        return self._with_queue(queue, func, *(args or []), **(kwargs or {}))

    @staticmethod
    def _with_queue(queue, func, *args, **kwargs):
        global _report_queue
        _report_queue = queue
        try:
            return func(*args, **kwargs)
        except BaseException as e:
            raise keep_causes(e)
        finally:
            _report_queue = None
