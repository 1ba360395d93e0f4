"""Worker entry point of ``horovod.run()``: ``python -m horovod.runner.run_task <driver_addr> <port>``.

Fetches the cloudpickled ``(func, args, kwargs)`` from the driver, runs it, and sends the
cloudpickled return value back under this process's rank. ``driver_addr`` ``-`` means the
address ``horovodrun`` gives every worker (``HOROVOD_GLOO_RENDEZVOUS_ADDR``: the launcher's
address that this host can reach, which is the driver's host too).
"""

import os
import sys

import cloudpickle

from horovod.runner.common.util.env import get_env_rank_and_size
from horovod.runner.task_service import TaskClient


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
    rank, _ = get_env_rank_and_size()
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
