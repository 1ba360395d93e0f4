"""The remote shell ``horovod.spark.run(use_mpi=True)`` gives mpirun
(``python -m horovod.spark.mpirun_rsh [ssh options] <host> <command ...>``): instead of ssh-ing to
``<host>`` (``hvd-spark-<task index>``), it has the driver (``HOROVOD_SPARK_RSH``, authenticated
with ``HOROVOD_SECRET_KEY``) run the command in that Spark task, waits for it and exits with its
status, as ssh would."""

import os
import sys

import cloudpickle

from horovod.runner.task_service import TaskClient
from horovod.spark.mpi_run import HOST_PREFIX, OP_EXEC, OP_WAIT


def main(argv):
    args = argv[1:]
    while args and args[0].startswith('-'):  # ssh options mpirun may add (-x, -q, ...)
        args = args[1:]
    if len(args) < 2 or not args[0].startswith(HOST_PREFIX):
        sys.stderr.write('horovod.spark.mpirun_rsh: usage: mpirun_rsh <{}N> <command...>, got {}\n'.format(
            HOST_PREFIX, argv[1:]))
        return 255
    index = int(args[0][len(HOST_PREFIX):])
    addr, port = os.environ['HOROVOD_SPARK_RSH'].rsplit(':', 1)
    client = TaskClient(addr, int(port), os.environ['HOROVOD_SECRET_KEY'], index)
    command = client.request(OP_EXEC, cloudpickle.dumps(['/bin/sh', '-c', ' '.join(args[1:])]))
    while True:
        status = client.request(OP_WAIT, command)
        if status:
            return int(status.decode())


if __name__ == '__main__':
    sys.exit(main(sys.argv))
