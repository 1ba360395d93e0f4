"""``SparkBackend``: how an estimator runs its training function (``horovod.spark.run``)."""

import horovod.spark

__all__ = ['Backend', 'SparkBackend']


class Backend:
    """Runs ``fn(*args, **kwargs)`` on ``num_processes()`` Horovod processes; rank-order results."""

    def run(self, fn, args=(), kwargs={}, env=None):
        raise NotImplementedError

    def num_processes(self):
        raise NotImplementedError


class SparkBackend(Backend):
    """horovod.spark.run on the active SparkContext. ``env`` is added to every process's
    environment (without CUDA_VISIBLE_DEVICES, which the tasks' own GPUs decide);
    ``run_kwargs`` go to horovod.spark.run (stdout, stderr, verbose, start_timeout, nics...)."""

    def __init__(self, num_proc=None, env=None, **run_kwargs):
        self._num_proc = num_proc
        self._env = {k: v for k, v in (env or {}).items() if k != 'CUDA_VISIBLE_DEVICES'}
        self._run_kwargs = run_kwargs

    def run(self, fn, args=(), kwargs={}, env=None):
        merged = dict(self._env)
        merged.update({k: v for k, v in (env or {}).items() if k != 'CUDA_VISIBLE_DEVICES'})
        return horovod.spark.run(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(), env=merged,
                                 **self._run_kwargs)

    def num_processes(self):
        if self._num_proc is not None:
            return self._num_proc
        from pyspark import SparkContext
        context = SparkContext._active_spark_context
        if context is None:
            raise Exception(horovod.spark.runner.NO_CONTEXT_MESSAGE)
        return context.defaultParallelism
