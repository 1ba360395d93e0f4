#!/usr/bin/env python3
"""A stand-in for LSF's jsrun, on PATH in the --jsrun tests: it records how it was called
(argv, the rankfile, the rendezvous variables) in $FAKE_JSRUN_LOG, then starts every rank of the
explicit resource file (--erf_input) on this machine with the variables jsrun gives its tasks
(OMPI_COMM_WORLD_*, JSM_NAMESPACE_*), and exits with the first non-zero exit status."""

import json
import os
import re
import subprocess
import sys


def main(argv):
    args = argv[1:]
    options = {}
    while args and args[0].startswith('--'):
        options[args[0]] = args[1]
        args = args[2:]
    with open(options['--erf_input']) as f:
        rankfile = f.read()
    ranks = [(int(r), host) for r, host in re.findall(r'^rank: (\d+): \{ hostname: ([^;]+);', rankfile, re.M)]
    with open(os.environ['FAKE_JSRUN_LOG'], 'w') as log:
        json.dump({'argv': argv, 'rankfile': rankfile, 'command': args,
                   'env': {k: v for k, v in os.environ.items() if k.startswith('HOROVOD_')}}, log)
    size = len(ranks)
    procs = []
    for rank, host in sorted(ranks):
        on_host = [r for r, h in sorted(ranks) if h == host]
        env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(size),
                   OMPI_COMM_WORLD_LOCAL_RANK=str(on_host.index(rank)), OMPI_COMM_WORLD_LOCAL_SIZE=str(len(on_host)),
                   JSM_NAMESPACE_RANK=str(rank), JSM_NAMESPACE_SIZE=str(size))
        procs.append(subprocess.Popen(args, env=env))
    codes = [p.wait(timeout=120) for p in procs]
    return next((c for c in codes if c != 0), 0)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
