"""tests/gpu: the GPU path on the host-memory CUDA + NCCL stand-in (or a real GPU).

test_intake.py runs in one process on any build. DISTRIBUTED_FILES run on every rank under the
launcher: test_gpu_suite.py starts them under ``horovodrun -np 2`` and ``-np 3`` with the loader
pointed at the stand-in, once per GPU data path; a plain ``pytest tests/gpu`` does not collect
them directly.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DISTRIBUTED_FILES = ['test_collectives.py', 'test_killed_rank.py']
# Distributed too, started by test_gpu_suite.py at two ranks only.
TWO_RANK_FILES = ['test_tensorflow_gpu.py', 'test_tensorflow_gpu_ordering.py']
SINGLE_PROCESS_FILES = ['test_intake.py', 'test_gpu_suite.py', 'test_tf_device.py']


def under_launcher():
    return any(name in os.environ for name in ('HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK',
                                                'SLURM_PROCID'))


collect_ignore = SINGLE_PROCESS_FILES if under_launcher() else DISTRIBUTED_FILES + TWO_RANK_FILES
