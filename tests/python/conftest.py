"""Test layout.

Files in DISTRIBUTED_FILES run on every rank under the launcher
(``horovodrun -np N python -m pytest tests/python/<file>``). A plain ``pytest tests/python``
does not collect them directly: test_distributed.py launches each of them under
``horovodrun -np 2`` and ``-np 3`` (bounded by a timeout) and fails if any rank fails.
"""

import os

import pytest

DISTRIBUTED_FILES = ['test_core.py', 'test_torch.py', 'test_torch_optimizer.py', 'test_torch_sync_batch_norm.py',
                     'test_peer_lost.py',
                     'test_timeline.py', 'test_tensorflow.py', 'test_keras.py', 'test_jax.py']
SINGLE_PROCESS_FILES = ['test_distributed.py', 'test_mpi.py', 'test_adasum.py', 'test_single_process.py',
                        'test_build_queries.py', 'test_gpu_build.py',
                        'test_tf_examples.py', 'test_jax_examples.py', 'test_jax_jit_path.py',
                        'test_tensorflow_tf1.py',
                        'test_keras_backends.py',
                        'test_ray.py', 'test_ray_cluster.py', 'test_ray_netns.py', 'test_elastic_driver.py',
                        'test_rendezvous_server.py',
                        'test_spark.py', 'test_spark_elastic.py', 'test_spark_estimator.py', 'test_data_loader.py',
                        'test_spark_keras_estimator.py', 'test_spark_lightning.py']


def under_launcher():
    return any(name in os.environ for name in ('HOROVOD_RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK',
                                                'SLURM_PROCID'))


collect_ignore = SINGLE_PROCESS_FILES if under_launcher() else DISTRIBUTED_FILES


# The Spark estimator tests' session (local[2]) and DataFrame (the digits set, features as ml
# vectors scaled to [0, 1], integer labels).

@pytest.fixture(scope='module')
def spark():
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master('local[2]').appName('horovod-test-estimator')
               .config('spark.ui.enabled', 'false').config('spark.ui.showConsoleProgress', 'false')
               .config('spark.sql.shuffle.partitions', '4').getOrCreate())
    session.sparkContext.setLogLevel('ERROR')
    yield session
    session.stop()


@pytest.fixture(scope='module')
def digits(spark):
    from pyspark.ml.linalg import Vectors
    from sklearn.datasets import load_digits
    data = load_digits()
    rows = [(Vectors.dense((x / 16.0).tolist()), int(y)) for x, y in zip(data.data, data.target)]
    return spark.createDataFrame(rows, ['features', 'label'])


