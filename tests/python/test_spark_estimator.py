"""TorchEstimator / TorchModel on local[2] Spark with a LocalStore: fit on the digits data,
transform, validation split, history, checkpoints and resume; stores and argument errors."""

import os
import sys
import time

import pytest

pyspark = pytest.importorskip('pyspark')
torch = pytest.importorskip('torch')
import cloudpickle  # noqa: E402

from horovod.spark.common.store import DBFSLocalStore, FilesystemStore, LocalStore, Store  # noqa: E402
from horovod.spark.common.util import prepare_data  # noqa: E402
from horovod.spark.torch import TorchEstimator, TorchModel  # noqa: E402

pytestmark = pytest.mark.timeout(300)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_store_create_picks_by_path(tmp_path):
    assert type(Store.create(str(tmp_path))) is FilesystemStore
    assert type(Store.create('dbfs:/x')) is DBFSLocalStore and Store.create('dbfs:/x').prefix_path == '/dbfs/x'
    store = LocalStore(str(tmp_path))
    assert store.get_train_data_path(3) == str(tmp_path / 'intermediate_train_data.3')
    assert store.get_checkpoint_path('r1') == str(tmp_path / 'runs' / 'r1' / 'checkpoint')
    assert store.spark_path(store.get_val_data_path()) == 'file://' + str(tmp_path / 'intermediate_val_data')
    with store.open(store.get_checkpoint_path('r1'), 'wb') as f:
        f.write(b'x')
    assert store.exists(store.get_checkpoint_path('r1'))


def test_store_api(tmp_path):
    """Horovod's Store methods beyond the paths: run settings, protocol handling, file access,
    Lightning-style checkpoint listing, and syncing a local run folder into the store."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from horovod.spark.common.store import AbstractFilesystemStore
    store = LocalStore(str(tmp_path))
    assert isinstance(store, AbstractFilesystemStore) and store.get_filesystem() is store.fs
    assert store.saving_runs() and not LocalStore(str(tmp_path), save_runs=False).saving_runs()
    assert store.get_checkpoint_filename() == 'checkpoint' and store.get_logs_subdir() == 'logs'
    assert store.get_logs_path('r') == str(tmp_path / 'runs' / 'r' / 'logs')
    inside = str(tmp_path / 'x')
    assert store.get_full_path(inside) == 'file://' + inside == store.get_full_path_fn()(inside)
    assert store.get_localized_path('file://' + inside) == inside
    assert store.matches(inside) and store.matches('file://' + inside) and not store.matches('/elsewhere')
    store.write_text(inside, 'hello')
    assert store.read('file://' + inside) == b'hello' and store.exists('file://' + inside)

    folder = tmp_path / 'runs' / 'lit' / 'checkpoint'
    folder.mkdir(parents=True)
    for name in ('b.ckpt', 'a.ckpt', 'notes.txt'):
        (folder / name).write_text('.')
    assert store.get_checkpoints('lit') == ['a.ckpt', 'b.ckpt']
    assert store.get_checkpoints('lit', suffix='.txt') == ['notes.txt'] and store.get_checkpoints('none') == []

    with store.get_local_output_dir_fn('r2')() as local:
        os.makedirs(os.path.join(local, 'logs'))
        with open(os.path.join(local, 'logs', 'events'), 'w') as f:
            f.write('e')
        with open(os.path.join(local, 'model.ckpt'), 'w') as f:
            f.write('m')
        store.sync_fn('r2')(local)
    assert not os.path.exists(local)
    assert (tmp_path / 'runs' / 'r2' / 'logs' / 'events').read_text() == 'e'
    assert (tmp_path / 'runs' / 'r2' / 'model.ckpt').read_text() == 'm'

    path = store.get_train_data_path(9)
    os.makedirs(path)
    pq.write_table(pa.table({'a': [1, 2, 3]}), os.path.join(path, 'part-0.parquet'))
    assert store.is_parquet_dataset(path) and store.get_parquet_dataset(path).read().num_rows == 3


def accuracy(output, label):
    return (output.argmax(1) == label).float().mean().item()


def make_estimator(store, **overrides):
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    settings = dict(num_proc=2, store=store, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.01),
                    loss=torch.nn.functional.cross_entropy, metrics=[accuracy], feature_cols=['features'],
                    label_cols=['label'], validation=0.2, batch_size=32, epochs=4, random_seed=1, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def test_bad_arguments(tmp_path):
    store = LocalStore(str(tmp_path))
    with pytest.raises(ValueError, match='mutually exclusive'):
        make_estimator(store, loss_constructors=[lambda: torch.nn.CrossEntropyLoss()])._validate()
    with pytest.raises(ValueError, match=r'data_module=...\) must be a class with train_data\(\) and val_data\(\)'):
        make_estimator(store, data_module=object)._validate()
    with pytest.raises(ValueError, match=r"callbacks=...\): 3 defines none of the hooks set_model, on_train_begin"):
        make_estimator(store, callbacks=[3])._validate()
    with pytest.raises(ValueError, match=r"categorical_cols names \['age'\], which are not in feature_cols"):
        make_estimator(store, categorical_cols=['age'])._validate()
    with pytest.raises(ValueError, match="column 'features' is in both continuous_cols and categorical_cols"):
        make_estimator(store, continuous_cols=['features'], categorical_cols=['features'])._validate()
    with pytest.raises(ValueError, match='reader_pool_type must be one of thread, process, dummy'):
        make_estimator(store, reader_pool_type='greenlet')._validate()
    with pytest.raises(ValueError, match='val_reader_num_workers must be a positive integer'):
        make_estimator(store, val_reader_num_workers=0)._validate()
    with pytest.raises(ValueError, match='they need transformation_fn'):
        make_estimator(store, transformation_removed_fields=['label'])._validate()
    with pytest.raises(ValueError, match=r"removes \['label'\], which training reads"):
        make_estimator(store, transformation_fn=lambda df: df, transformation_removed_fields=['label'])._validate()
    with pytest.raises(TypeError, match='unexpected parameters: no_such'):
        make_estimator(store, no_such=1)


@pytest.fixture(scope='module')
def store(tmp_path_factory):
    return LocalStore(str(tmp_path_factory.mktemp('store')))


def test_fit_transform_history_and_checkpoint(spark, digits, store, capfd):
    estimator = make_estimator(store, run_id='digits')
    model = estimator.fit(digits)
    assert isinstance(model, TorchModel)
    # Horovod's model parameter names work beside ours.
    assert model.getFeatureColumns() == model.getFeatureCols() == ['features'] and model.getLabelColumns() == ['label']
    assert TorchModel(model=model.getModel(), feature_columns=['f'], label_columns=['l']).getFeatureCols() == ['f']
    history = model.getHistory()
    assert len(history['loss']) == 4 and len(history['val_loss']) == 4
    assert history['loss'][-1] < history['loss'][0]
    assert history['val_accuracy'][-1] > 0.85, history
    assert store.exists(store.get_checkpoint_path('digits'))
    # The intermediate data is removed after fit.
    assert not store.exists(store.get_train_data_path(0))

    predicted = model.setOutputCols(['logits']).transform(digits)
    assert predicted.columns == ['features', 'label', 'logits']
    rows = predicted.select('label', 'logits').collect()
    assert len(rows) == digits.count() and len(rows[0]['logits']) == 10
    correct = sum(int(max(range(10), key=lambda k: r['logits'][k]) == r['label']) for r in rows)
    assert correct / len(rows) > 0.85
    # transform() reads a sample row without cutting a Python worker off mid-write (digits is
    # built from Python data, whose workers pyspark's limit(1) would leave with a broken pipe).
    time.sleep(1)
    assert 'BrokenPipeError' not in capfd.readouterr().err


def test_prepare_data_fit_on_parquet_resumes_from_checkpoint(spark, digits, store):
    """Same run_id as the test above: its checkpoint (epoch 3 of 4 done) is resumed, so
    epochs=5 trains one more epoch, validating on the rows flagged in the is_val column."""
    from pyspark.sql import functions as F
    with store.open(store.get_checkpoint_path('digits'), 'rb') as f:
        before = torch.load(f, weights_only=False)['history']
    df = digits.withColumn('is_val', (F.monotonically_increasing_id() % 5 == 0))
    with prepare_data(2, store, df, label_columns=['label'], feature_columns=['features'], validation='is_val',
                      partitions_per_process=2) as idx:
        assert store.is_parquet_dataset(store.get_val_data_path(idx))
        model = make_estimator(store, run_id='digits', epochs=5, validation=None).fit_on_parquet(dataset_idx=idx)
    history = model.getHistory()
    assert len(history['loss']) == 5 and history['loss'][:4] == before['loss']
    assert len(history['val_loss']) == 5
    assert not store.exists(store.get_train_data_path(idx))


def test_reader_parameters_and_transformation_fn(spark, digits, store):
    """The reader parameters in a real fit: reader processes, an in-memory cache, a shuffling
    buffer, and a transformation_fn that shifts every label by one (in the training processes'
    reader, for training and validation data): the trained model predicts the shifted digit."""
    import numpy as np

    def shift(frame):
        frame['label'] = (frame['label'] + 1) % 10
        return frame
    model = make_estimator(store, epochs=3, reader_pool_type='process', train_reader_num_workers=2,
                           val_reader_num_workers=1, inmemory_cache_all=True, shuffle_buffer_size=200,
                           transformation_fn=shift,
                           transformation_edit_fields=[('label', np.int64, (), False)]).fit(digits)
    history = model.getHistory()
    assert len(history['loss']) == 3 and history['loss'][-1] < history['loss'][0]
    assert history['val_accuracy'][-1] > 0.8, history
    rows = model.setOutputCols(['logits']).transform(digits).select('label', 'logits').collect()
    shifted = sum(int(int(np.argmax(r['logits'])) == (r['label'] + 1) % 10) for r in rows)
    assert shifted / len(rows) > 0.8


def test_save_and_load_estimators_models_and_pipelines(spark, digits, store, tmp_path):
    """Spark ML persistence: an estimator and a fitted model save and load (write().save, save,
    overwrite, load) with their parameters, and so does a PipelineModel holding the model."""
    from pyspark.ml import Pipeline, PipelineModel
    estimator = make_estimator(store, epochs=1, run_id='persist', batch_size=64)
    estimator.save(str(tmp_path / 'estimator'))
    loaded = TorchEstimator.load(str(tmp_path / 'estimator'))
    assert loaded.uid == estimator.uid and loaded.getBatchSize() == 64 and loaded.getRunId() == 'persist'
    assert loaded.getStore().prefix_path == store.prefix_path
    assert [p.shape for p in loaded.getModel().parameters()] == [p.shape for p in estimator.getModel().parameters()]
    with pytest.raises(Exception):
        estimator.save(str(tmp_path / 'estimator'))  # exists: overwrite() says so
    estimator.setBatchSize(16).write().overwrite().save(str(tmp_path / 'estimator'))
    assert TorchEstimator.load(str(tmp_path / 'estimator')).getBatchSize() == 16
    with pytest.raises(TypeError, match='not a horovod.spark.torch.model.TorchModel'):
        TorchModel.load(str(tmp_path / 'estimator'))

    fitted = Pipeline(stages=[loaded]).fit(digits)
    fitted.write().overwrite().save(str(tmp_path / 'pipeline'))
    again = PipelineModel.load(str(tmp_path / 'pipeline'))
    model = again.stages[0]
    assert isinstance(model, TorchModel) and model.getHistory() == fitted.stages[0].getHistory()
    before = fitted.transform(digits).select('label__output').collect()
    after = again.transform(digits).select('label__output').collect()
    assert [r[0] for r in before] == [r[0] for r in after]


def test_train_minibatch_fn_replaces_the_training_step(spark, digits, store):
    """A train_minibatch_fn that computes the loss but never steps: the weights come back as
    they went in, while the history still records its losses."""
    def evaluate_only(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights):
        outputs, labels = transform_outputs(model(*inputs), labels)
        return outputs, loss_fn(outputs, labels, sample_weights).detach()
    estimator = make_estimator(store, epochs=2, batch_size=256, train_minibatch_fn=evaluate_only)
    before = {k: v.clone() for k, v in estimator.getModel().state_dict().items()}
    model = estimator.fit(digits)
    after = model.getModel().state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert len(model.getHistory()['loss']) == 2
    with pytest.raises(ValueError, match='train_minibatch_fn must be a function'):
        make_estimator(store, train_minibatch_fn=3)._validate()


def test_tabular_types_and_data_module_arguments():
    """categorical_cols become int64 category ids (whole numbers, else a ValueError naming the
    column), continuous_cols float32; a data module written for Horovod's arguments alone is
    constructed without this build's extras."""
    import numpy as np
    from horovod.spark.common.datamodule import DataModule, construct, tabular_types
    batch = {'city': np.array([1.0, 3.0]), 'age': np.array([30, 41]), 'other': np.array([0.5, 1.5])}
    typed = tabular_types(batch, ['city'], ['age'])
    assert typed['city'].dtype == np.int64 and typed['city'].tolist() == [1, 3]
    assert typed['age'].dtype == np.float32 and typed['other'] is batch['other']
    with pytest.raises(ValueError, match=r"categorical_cols: column 'other' holds values that are not category ids"):
        tabular_types(batch, ['other'], [])

    class HorovodOnly(DataModule):
        def __init__(self, label_cols=None, **kwargs):
            super().__init__(**kwargs)

        def train_data(self):
            return []

        def val_data(self):
            return []

    class Plain:
        def __init__(self, train_dir, val_dir):
            self.dirs = train_dir, val_dir
    module = construct(HorovodOnly, dict(train_dir='t', val_dir='v', label_cols=['y']), dict(store='s'))
    assert module.store == 's' and module.train_dir == 't'  # **kwargs: the extras arrive
    assert construct(Plain, dict(train_dir='t', val_dir='v'), dict(store='s')).dirs == ('t', 'v')
    from horovod.spark.torch.datamodule import NVTabularDataModule
    with pytest.raises(NotImplementedError, match='NVTabularDataModule needs NVTabular, which needs a CUDA GPU'):
        NVTabularDataModule(train_dir='t', val_dir='v')


def test_custom_data_module_and_callbacks(spark, digits, store, tmp_path):
    """A DataModule subclass feeds the torch loop (batches as (features, labels) pairs with every
    label shifted by one: the model learns the shifted digit), constructed in every process with
    Horovod's arguments. Callbacks run on every rank in order; rank 1 alone asks to stop after
    epoch 1, and every rank stops there."""
    import json

    import numpy as np
    from horovod.spark.common.datamodule import DataModule
    folder = str(tmp_path)

    class ShiftedLabels(DataModule):
        def __enter__(self):
            with open(os.path.join(folder, 'dm%d' % self.cur_shard), 'w') as f:
                json.dump(dict(shard_count=self.shard_count, schema_fields=self.schema_fields, has_val=self.has_val,
                               steps=self.steps_per_epoch_train, label_cols=self.label_cols), f)
            self.readers = [self.shard_reader(train=True), self.shard_reader(train=False)]
            return self

        def __exit__(self, *exc):
            for reader in self.readers:
                reader.close()

        def _batches(self, reader, batch_size):
            while True:
                for batch in reader.epoch(reader.rows, batch_size):
                    yield ({'features': torch.from_numpy(batch['features'])},
                           torch.from_numpy((batch['label'] + 1) % 10))

        def train_data(self):
            return self._batches(self.readers[0], self.train_batch_size)

        def val_data(self):
            return self._batches(self.readers[1], self.val_batch_size)

    class Recorder:
        def __init__(self):
            self.stop_training = False

        def _write(self, line):
            import horovod.torch as hvd
            with open(os.path.join(folder, 'events%d' % hvd.rank()), 'a') as f:
                f.write(line + '\n')

        def set_model(self, model):
            self._write('set_model ' + type(model).__name__)

        def on_train_begin(self, logs):
            self._write('train_begin')

        def on_epoch_end(self, epoch, logs):
            import horovod.torch as hvd
            self._write('epoch_end {} {}'.format(epoch, ','.join(sorted(logs))))
            self.stop_training = epoch == 1 and hvd.rank() == 1

        def on_train_end(self, logs):
            self._write('train_end')

    model = make_estimator(store, epochs=4, data_module=ShiftedLabels, callbacks=[Recorder()]).fit(digits)
    history = model.getHistory()
    assert len(history['loss']) == 2 and history['val_accuracy'][-1] > 0.8, history
    expected = ['set_model Sequential', 'train_begin', 'epoch_end 0 accuracy,loss,val_accuracy,val_loss',
                'epoch_end 1 accuracy,loss,val_accuracy,val_loss', 'train_end']
    for rank in (0, 1):
        assert (tmp_path / 'events{}'.format(rank)).read_text().split('\n')[:-1] == expected
        arguments = json.loads((tmp_path / 'dm{}'.format(rank)).read_text())
        assert arguments['shard_count'] == 2 and arguments['schema_fields'] == ['features', 'label']
        assert arguments['has_val'] and arguments['label_cols'] == ['label'] and arguments['steps'] > 0
    rows = model.setOutputCols(['logits']).transform(digits).select('label', 'logits').collect()
    shifted = sum(int(int(np.argmax(r['logits'])) == (r['label'] + 1) % 10) for r in rows)
    assert shifted / len(rows) > 0.8


def test_categorical_and_continuous_columns(spark, store):
    """categorical_cols reach the model as int64 (an Embedding takes them) and continuous_cols
    as float32 (a Linear takes an integer column so typed), through the default data module."""
    import random
    rng = random.Random(0)
    rows = [(float(c), rng.randint(0, 3), c % 3) for c in (rng.randrange(9) for _ in range(600))]
    df = spark.createDataFrame(rows, 'city double, rooms int, label long')

    class Tabular(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.linear = torch.nn.Embedding(9, 8), torch.nn.Linear(9, 3)

        def forward(self, city, rooms):
            assert city.dtype == torch.int64 and rooms.dtype == torch.float32, (city.dtype, rooms.dtype)
            return self.linear(torch.cat([self.embed(city), rooms.view(-1, 1) / 3], 1))

    module = Tabular()
    model = TorchEstimator(num_proc=2, store=store, model=module, optimizer=torch.optim.Adam(module.parameters(), 0.05),
                           loss=torch.nn.functional.cross_entropy, metrics=[accuracy], feature_cols=['city', 'rooms'],
                           label_cols=['label'], categorical_cols=['city'], continuous_cols=['rooms'],
                           validation=0.2, batch_size=16, epochs=3, random_seed=1, verbose=0).fit(df)
    assert model.getHistory()['val_accuracy'][-1] > 0.9, model.getHistory()
    assert model.getCategoricalCols() == ['city']  # transform() gives the Embedding int64 ids too
    predicted = model.setOutputCols(['scores']).transform(df).select('label', 'scores').collect()
    correct = sum(int(max(range(3), key=lambda k: r['scores'][k]) == r['label']) for r in predicted)
    assert correct / len(predicted) > 0.9


def test_compress_sparse_cols_stores_sparse_vectors_and_reads_them_dense(spark, digits, store):
    """compress_sparse: Spark's vector struct on disk (a SparseVector's indices and values only),
    the same dense rows out of the reader, in a transformation_fn and in a fit."""
    import numpy as np
    from pyspark.ml.linalg import Vectors
    from horovod.spark.common.reader import ShardReader, Transform
    rows = digits.collect()
    # Half the rows sparse (digits are about half zeros), half dense; the label says which.
    mixed = [((Vectors.sparse(64, {i: v for i, v in enumerate(r['features']) if v}) if n % 2 else r['features']),
              int(r['label']), n) for n, r in enumerate(rows)]
    df = spark.createDataFrame(mixed, ['features', 'label', 'n'])
    with prepare_data(1, store, df, label_columns=['label', 'n'], feature_columns=['features'],
                      compress_sparse=True, partitions_per_process=2) as idx:
        path = store.get_train_data_path(idx)
        stored = store.get_parquet_dataset(path).schema.field('features').type
        assert stored.num_fields == 4  # struct<type, size, indices, values>
        with ShardReader(store, path, ['features', 'n'], 0, 1) as reader:
            got = {int(n): f for chunk in reader.epoch(len(rows), len(rows))
                   for n, f in zip(chunk['n'], chunk['features'])}
        assert len(got) == len(rows)
        for n, r in enumerate(rows):
            np.testing.assert_array_equal(got[n], np.asarray(r['features'], np.float32))

        def double(frame):
            frame['features'] = frame['features'].map(lambda v: v * 2)
            return frame
        with ShardReader(store, path, ['features', 'n'], 0, 1, transform=Transform(double)) as reader:
            chunk = next(iter(reader.epoch(8, 8)))
        for f, n in zip(chunk['features'], chunk['n']):
            np.testing.assert_array_equal(f, 2 * np.asarray(rows[int(n)]['features'], np.float32))
    model = make_estimator(store, epochs=1, compress_sparse_cols=True, validation=None).fit(df.drop('n'))
    assert np.isfinite(model.getHistory()['loss'][-1])
