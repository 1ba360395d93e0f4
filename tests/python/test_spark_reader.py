"""The estimators' streaming Parquet reader (horovod.spark.common.reader) without Spark: Parquet
files written with pyarrow as Spark writes them (several files, several row groups, array
columns). Every pool type, with and without shuffling and caching: an epoch has exactly the rows
asked for and every row of the shard at least once; epochs cut short; transformation_fn;
bad parameters; and memory that stays bounded while a shard many times larger streams by."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pa = pytest.importorskip('pyarrow')
pq = pytest.importorskip('pyarrow.parquet')

from horovod.spark.common.reader import BatchStream, ShardReader, Transform, epoch_rows  # noqa: E402
from horovod.spark.common.store import LocalStore  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def write_dataset(path, files=6, base_rows=1000, row_group_size=300):
    """Rows with ids 0..N-1 over ``files`` files; x = [id, id, id] (array<double>), y = id is even."""
    os.makedirs(path)
    start = 0
    for f in range(files):
        n = base_rows + 37 * f
        ids = np.arange(start, start + n)
        start += n
        table = pa.table({'id': ids, 'x': pa.array([[float(i)] * 3 for i in ids], type=pa.list_(pa.float64())),
                          'y': ids % 2 == 0})
        pq.write_table(table, os.path.join(path, 'part-{:05d}.parquet'.format(f)), row_group_size=row_group_size)
    return start


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    store = LocalStore(str(tmp_path_factory.mktemp('reader_store')))
    path = store.get_train_data_path(0)
    total = write_dataset(path)
    return store, path, total


@pytest.mark.parametrize('pool', ['dummy', 'thread', 'process'])
@pytest.mark.parametrize('shuffle', [False, True])
@pytest.mark.parametrize('cache', [False, True])
def test_epochs_have_every_row_of_the_shard(dataset, pool, shuffle, cache):
    store, path, total = dataset
    shards = []
    for rank in range(2):
        with ShardReader(store, path, ['id', 'x', 'y'], rank, 2, shuffle=shuffle, shuffle_buffer_size=500,
                         num_workers=2, pool_type=pool, inmemory_cache_all=cache, seed=3) as reader:
            epochs = []
            for _ in range(3):
                ids = []
                for batch in reader.epoch(reader.rows + 100, 64):
                    assert len(batch['id']) <= 64
                    assert batch['x'].shape == (len(batch['id']), 3) and batch['x'].dtype == np.float32
                    assert (batch['x'][:, 0] == batch['id']).all()
                    assert batch['y'].dtype == np.float32 and (batch['y'] == (batch['id'] % 2 == 0)).all()
                    ids.extend(batch['id'].tolist())
                assert len(ids) == reader.rows + 100         # exactly the rows asked for
                assert len(set(ids)) == reader.rows          # every row of the shard, some again
                epochs.append(ids)
                for i, _ in enumerate(reader.epoch(reader.rows, 64)):  # an epoch cut short
                    if i == 3:
                        break
            if shuffle:
                assert epochs[0] != epochs[1] and epochs[0][:reader.rows] != sorted(epochs[0][:reader.rows])
            elif pool == 'dummy':
                assert epochs[0][:reader.rows] == sorted(epochs[0][:reader.rows])
            shards.append(set(epochs[0]))
    assert not shards[0] & shards[1] and len(shards[0] | shards[1]) == total  # disjoint, complete


def test_batch_stream_goes_on_where_an_epoch_stopped(dataset):
    store, path, _ = dataset
    with ShardReader(store, path, ['id'], 0, 1, pool_type='dummy') as reader:
        stream = BatchStream(reader, reader.rows, 100, steps=7)
        first, second = [b['id'] for b in stream], [b['id'] for b in stream]
        assert len(stream) == 7 and len(first) == 7 and len(second) == 7
        assert np.concatenate(first + second).tolist() == list(range(1400))
        assert len(BatchStream(reader, reader.rows, 100)) == -(-reader.rows // 100)


def test_transformation_fn_with_its_fields(dataset):
    store, path, _ = dataset

    def add_z(frame):
        frame['z'] = frame['id'] * 2.0
        return frame.drop(columns=['y'])
    for pool in ('dummy', 'process'):
        transform = Transform(add_z, edit_fields=[('z', np.float64, (), False)], removed_fields=['y'])
        with ShardReader(store, path, ['id', 'x', 'y'], 0, 2, pool_type=pool, transform=transform) as reader:
            assert reader.output_columns == ['id', 'x', 'z']
            batch = next(reader.epoch(10, 10))
            assert sorted(batch) == ['id', 'x', 'z'] and (batch['z'] == 2 * batch['id']).all()
            assert batch['x'].shape == (10, 3)


def test_bad_parameters_and_empty_shards(dataset):
    store, path, _ = dataset
    with pytest.raises(ValueError, match='reader_pool_type must be one of thread, process, dummy'):
        ShardReader(store, path, ['id'], 0, 1, pool_type='greenlet')
    with pytest.raises(ValueError, match='must be a positive integer'):
        ShardReader(store, path, ['id'], 0, 1, num_workers=0)
    with pytest.raises(ValueError, match='shuffle_buffer_size must be a non-negative integer'):
        ShardReader(store, path, ['id'], 0, 1, shuffle_buffer_size=-1)
    with pytest.raises(ValueError, match=r'The validation data of ranks \[1\] is empty'):
        epoch_rows([4, 0], 'validation')
    assert epoch_rows([7, 10], 'training') == 10


STREAM_SCRIPT = textwrap.dedent('''
    import sys
    from horovod.spark.common.reader import ShardReader
    from horovod.spark.common.store import LocalStore

    def status(field):
        with open('/proc/self/status') as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ':'))
    store, pool, size = LocalStore(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # the peak (VmHWM) starts again from here
    before = status('VmRSS')
    with ShardReader(store, store.get_train_data_path(0), ['x', 'y'], 0, size, shuffle=True, num_workers=2,
                     pool_type=pool) as reader:
        rows = 0
        for batch in reader.epoch(reader.rows, 256):
            rows += len(batch['y'])
    print(rows, status('VmHWM') - before)
''')


@pytest.fixture(scope='module')
def gigabyte(tmp_path_factory):
    """1 GiB of float32 features: 16 files of 64 Ki rows x 1 KiB, row groups of 16 MiB."""
    store = LocalStore(str(tmp_path_factory.mktemp('gigabyte')))
    path = store.get_train_data_path(0)
    os.makedirs(path)
    rows_per_file, width = 1 << 16, 256
    rng = np.random.default_rng(0)
    for f in range(16):
        x = rng.random((rows_per_file, width), dtype=np.float32)
        x = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), width).cast(pa.list_(pa.float32()))
        pq.write_table(pa.table({'x': x, 'y': np.arange(rows_per_file)}), os.path.join(path, 'p{}.parquet'.format(f)),
                       row_group_size=1 << 14, compression='none')
    return store, 16 * rows_per_file, 16 * rows_per_file * width * 4 // 1024


@pytest.mark.parametrize('pool', ['thread', 'dummy'])
def test_memory_does_not_grow_with_the_shard(gigabyte, pool):
    """Streaming a quarter of 1 GiB and the whole of it (shuffled, through the default 32 MiB
    shuffling buffer) grows a process's peak RSS alike: by the chunks in flight, the buffer and
    pyarrow's row-group reading state, not by the data. (The whole shard in memory, as the
    estimators' reader used to hold it, grows it by more than 1 GiB.)"""
    store, rows, data_kib = gigabyte
    grew = {}
    for size in (4, 1):
        out = subprocess.run([sys.executable, '-c', STREAM_SCRIPT, store.prefix_path, pool, str(size)],
                             capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr
        got, grew[size] = map(int, out.stdout.split())
        assert got == rows // size
    assert grew[1] < grew[4] + data_kib // 8, 'peak RSS grew by {} KiB for 1/4 of {} KiB, {} KiB for all'.format(
        grew[4], data_kib, grew[1])
    assert grew[1] < data_kib // 2, grew
