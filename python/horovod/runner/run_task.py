"""Worker entry point of ``horovod.run()``: ``python -m horovod.runner.run_task <driver_addr> <port>``.

Fetches the cloudpickled ``(func, args, kwargs)`` from the driver, runs it, and sends the
cloudpickled return value back under this process's rank. ``driver_addr`` ``-`` means the
address ``horovodrun`` gives every worker (``HOROVOD_GLOO_RENDEZVOUS_ADDR``: the launcher's
address that this host can reach, which is the driver's host too).
"""

import os
import sys

import cloudpickle

from horovod.runner.task_service import TaskClient


def _pair(rank_var, size_var):
    rank, size = os.environ.get(rank_var), os.environ.get(size_var)
    if rank is None and size is None:
        return None
    if rank is None or size is None:
        raise RuntimeError('Could not determine process rank and size: only one of {} and {} is set'.format(
            rank_var, size_var))
    return int(rank), int(size)


def rank_and_size():
    """(rank, size) from the first complete pair of HOROVOD_*, OMPI_COMM_WORLD_*, PMI_*; (0, 1)
    when none is set."""
    for rank_var, size_var in (('HOROVOD_RANK', 'HOROVOD_SIZE'),
                               ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE'),
                               ('PMI_RANK', 'PMI_SIZE')):
        pair = _pair(rank_var, size_var)
        if pair is not None:
            return pair
    return 0, 1


def main(argv):
    if len(argv) != 3:
        sys.stderr.write('usage: python -m horovod.runner.run_task <driver_addr|-> <port>\n')
        return 2
    addr = argv[1]
    if addr == '-':
        addr = os.environ.get('HOROVOD_GLOO_RENDEZVOUS_ADDR', '127.0.0.1')
    port = int(argv[2])
    key = os.environ.get('HOROVOD_SECRET_KEY')
    if not key:
        sys.stderr.write('horovod.runner.run_task: HOROVOD_SECRET_KEY is not set; start it through horovod.run()\n')
        return 2
    rank, _ = rank_and_size()
    client = TaskClient(addr, port, key, rank)
    func, args, kwargs = cloudpickle.loads(client.fetch_function())
    try:
        result = func(*args, **kwargs)
    except BaseException as e:
        sys.stderr.write('User function raise error: {error}\n'.format(error=str(e)))
        sys.stderr.flush()
        raise
    client.rank = _final_rank(rank)
    client.send_result(cloudpickle.dumps(result))
    return 0


def _final_rank(launch_rank):
    """The rank a result is filed under: in an elastic job ranks change from round to round, so
    the rank of the last round this process joined (when Horovod is still initialized), else the
    rank it was launched with."""
    if not os.environ.get('HOROVOD_ELASTIC_WORKER_ID'):
        return launch_rank
    try:
        from horovod import _core
        if _core.is_initialized():
            return _core.rank()
    except ImportError:
        pass
    return launch_rank


if __name__ == '__main__':
    sys.exit(main(sys.argv))
