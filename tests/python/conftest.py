"""Test layout.

Files in DISTRIBUTED_FILES run on every rank under the launcher
(``horovodrun -np N python -m pytest tests/python/<file>``). A plain ``pytest tests/python``
does not collect them directly: test_distributed.py launches each of them under
``horovodrun -np 2`` and ``-np 3`` (bounded by a timeout) and fails if any rank fails.
"""

import os

DISTRIBUTED_FILES = ['test_core.py', 'test_torch.py', 'test_torch_optimizer.py', 'test_peer_lost.py',
                     'test_timeline.py', 'test_tensorflow.py', 'test_keras.py']
SINGLE_PROCESS_FILES = ['test_distributed.py', 'test_mpi.py', 'test_single_process.py', 'test_build_queries.py',
                        'test_tf_examples.py', 'test_tensorflow_tf1.py', 'test_keras_backends.py',
                        'test_ray.py', 'test_ray_cluster.py', 'test_rendezvous_server.py',
                        'test_spark.py', 'test_spark_estimator.py']


def under_launcher():
    return any(name in os.environ for name in ('HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK',
                                                'SLURM_PROCID'))


collect_ignore = SINGLE_PROCESS_FILES if under_launcher() else DISTRIBUTED_FILES
