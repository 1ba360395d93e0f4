"""A TorchEstimator trains on local Spark on data several times the memory its training processes
may use: each process puts itself into a memory cgroup (v1 or v2) of its own on its first forward
pass, with a limit of 256 MiB on what it allocates from then on, while its shard of the training
data is 768 MiB (1.5 GiB in all). The streaming reader stays within the limit; a reader that
held the shard in memory would be killed by the kernel and the fit would fail.

Needs root and a writable memory cgroup (skipped otherwise, with the reason)."""

import math
import os
import sys

import pytest

pyspark = pytest.importorskip('pyspark')
torch = pytest.importorskip('torch')
import cloudpickle  # noqa: E402

from horovod.spark.common.store import LocalStore  # noqa: E402
from horovod.spark.torch import TorchEstimator  # noqa: E402

pytestmark = pytest.mark.timeout(900)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

LIMIT = 256 << 20
WIDTH = 256                 # float32 features per row: 1 KiB
ROWS = 3 * LIMIT * 2 // (WIDTH * 4)  # 768 MiB per rank, 2 ranks


def memory_cgroup_parent():
    """(version, folder under which this process may create memory cgroups) or a skip."""
    if os.geteuid() != 0:
        pytest.skip('needs root to create memory cgroups')
    with open('/proc/self/cgroup') as f:
        lines = [line.strip().split(':', 2) for line in f]
    for _, controllers, path in lines:
        if 'memory' in controllers.split(','):
            folder = os.path.join('/sys/fs/cgroup/memory', path.lstrip('/'))
            if os.access(folder, os.W_OK):
                return 1, folder
    unified = [path for hierarchy, controllers, path in lines if hierarchy == '0']
    if unified and os.path.exists('/sys/fs/cgroup/cgroup.controllers'):
        with open('/sys/fs/cgroup/cgroup.controllers') as f:
            if 'memory' in f.read().split():
                folder = os.path.join('/sys/fs/cgroup', unified[0].lstrip('/'))
                if os.access(folder, os.W_OK):
                    return 2, folder
    pytest.skip('no writable memory cgroup (v1 memory controller or v2 with memory enabled)')


def make_cgroup(version, parent, name):
    folder = os.path.join(parent, name)
    os.makedirs(folder, exist_ok=True)
    settings = ({'memory.limit_in_bytes': LIMIT, 'memory.memsw.limit_in_bytes': LIMIT} if version == 1 else
                {'memory.max': LIMIT, 'memory.swap.max': 0})
    for key, value in settings.items():
        if os.path.exists(os.path.join(folder, key)):
            with open(os.path.join(folder, key), 'w') as f:
                f.write(str(value))
    return folder


class Limited(torch.nn.Module):
    """A linear model that, on its first forward in a training process, moves that process into
    the cgroup ``folders[rank]`` (charges already made stay where they were: the limit is on
    what the process allocates from then on: the reader, the batches, the training)."""

    def __init__(self, folders):
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, 1)
        self.folders = folders
        self.joined = False

    def forward(self, x):
        rank = os.environ.get('HOROVOD_RANK')
        if not self.joined and rank is not None:
            with open(os.path.join(self.folders[int(rank)], 'cgroup.procs'), 'w') as f:
                f.write(str(os.getpid()))
            self.joined = True
        return self.linear(x)


@pytest.fixture
def cgroups():
    version, parent = memory_cgroup_parent()
    folders = [make_cgroup(version, parent, 'hvd-spark-memory-{}-{}'.format(os.getpid(), r)) for r in range(2)]
    yield folders
    for folder in folders:
        try:
            os.rmdir(folder)  # empty once the processes have ended
        except OSError:
            pass


def test_training_data_several_times_the_memory_limit(cgroups, tmp_path):
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    spark = (SparkSession.builder.master('local[2]').appName('horovod-test-spark-memory')
             .config('spark.ui.enabled', 'false').config('spark.ui.showConsoleProgress', 'false').getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    try:
        # Each row repeats one random value: cheap for Spark to make and to store (Parquet
        # encodes the runs), the full 1 KiB per row once decoded, which is what memory holds.
        df = spark.range(ROWS, numPartitions=8).select(
            F.array_repeat(F.rand(seed=1).cast('float'), WIDTH).alias('features'))
        df = df.withColumn('label', F.col('features')[0] * 2.0 + 1.0)
        model = Limited(cgroups)
        estimator = TorchEstimator(
            num_proc=2, store=LocalStore(str(tmp_path)), model=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=1e-4), loss=torch.nn.functional.mse_loss,
            feature_cols=['features'], label_cols=['label'], batch_size=4096, epochs=1, shuffle=False,
            partitions_per_process=2, reader_pool_type='dummy', verbose=0,
            inmemory_cache_all=os.environ.get('HVD_TEST_CACHE_ALL') == '1')  # 1: the control that must fail
        fitted = estimator.fit(df)
        history = fitted.getHistory()
        assert len(history['loss']) == 1 and math.isfinite(history['loss'][0]), history  # it trained through
        for folder in cgroups:
            name = 'memory.max_usage_in_bytes' if os.path.exists(os.path.join(folder, 'memory.max_usage_in_bytes')) \
                else 'memory.peak'
            if os.path.exists(os.path.join(folder, name)):
                with open(os.path.join(folder, name)) as f:
                    peak = int(f.read())
                sys.stderr.write('{}: peak {} MiB of the {} MiB limit\n'.format(folder, peak >> 20, LIMIT >> 20))
    finally:
        spark.stop()
