"""``python -m horovod.runner.launch [options] command``: the ``horovodrun`` command line.

Horovod's console script pointed here (``run_commandline``); in this package the launcher is a
C++ executable, so this module only hands the arguments over to it.
"""

import os
import sys

from horovod.runner.binary import find_horovodrun


def run_commandline(argv=None):
    """Replaces the current process with ``horovodrun <argv>`` (default: ``sys.argv[1:]``)."""
    args = sys.argv[1:] if argv is None else list(argv)
    binary = find_horovodrun()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [binary] + args)


if __name__ == '__main__':
    run_commandline()
