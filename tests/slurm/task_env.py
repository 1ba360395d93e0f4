"""Writes DIR/task-<SLURM_PROCID>.json: the host name and the variables a launcher gave this task
(SLURM_*, PMI_*, PMIX_*, OMPI_*), the environment contract the engine reads its place in the job
from. Usage: python3 task_env.py DIR"""

import json
import os
import socket
import sys

prefixes = ('SLURM_', 'PMI_', 'PMIX_', 'OMPI_')
task = {'host': socket.gethostname(), 'env': {k: v for k, v in os.environ.items() if k.startswith(prefixes)}}
with open(os.path.join(sys.argv[1], 'task-{}.json'.format(os.environ['SLURM_PROCID'])), 'w') as out:
    json.dump(task, out)
