"""KerasEstimator / KerasModel on local[2] Spark with a LocalStore (fixtures in conftest.py):
fit on the digits data, transform, validation split, averaged history, user callbacks,
checkpoints and resume, checkpoint_callback, sample weights, tf-keras; argument errors."""

import os
import pickle
import sys

import pytest

pyspark = pytest.importorskip('pyspark')
keras = pytest.importorskip('keras')
import cloudpickle  # noqa: E402

import horovod.keras as hvd_keras  # noqa: E402
from horovod.spark.common.store import LocalStore  # noqa: E402
from horovod.spark.common.util import prepare_data  # noqa: E402
from horovod.spark.keras import KerasEstimator, KerasModel  # noqa: E402

pytestmark = pytest.mark.timeout(300)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def digits_model(keras_module=keras, input_shape=(64,)):
    layers = keras_module.layers
    return keras_module.Sequential([keras_module.Input(input_shape), layers.Flatten(),
                                    layers.Dense(32, activation='relu'), layers.Dense(10, activation='softmax')])


def make_estimator(store, keras_module=keras, **overrides):
    settings = dict(num_proc=2, store=store, model=digits_model(keras_module),
                    optimizer=keras_module.optimizers.Adam(0.01), loss='sparse_categorical_crossentropy',
                    metrics=['accuracy'], feature_cols=['features'], label_cols=['label'], validation=0.2,
                    batch_size=32, epochs=4, random_seed=1, verbose=0)
    settings.update(overrides)
    return KerasEstimator(**settings)


def driver_accuracy(model):
    """The trained Keras model's accuracy on the whole digits set, computed on the driver."""
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    keras_model = model.getModel()
    x = (x / 16.0).reshape((len(x),) + tuple(keras_model.inputs[0].shape[1:]))
    return float((keras_model.predict(x, verbose=0).argmax(1) == y).mean())


def transformed_accuracy(model, df):
    rows = model.setOutputCols(['probabilities']).transform(df).select('label', 'probabilities').collect()
    assert len(rows) == df.count() and len(rows[0]['probabilities']) == 10
    return sum(int(max(range(10), key=lambda k: r['probabilities'][k]) == r['label']) for r in rows) / len(rows)


def test_bad_arguments(tmp_path):
    store = LocalStore(str(tmp_path))
    with pytest.raises(TypeError, match='needs a Keras model'):
        make_estimator(store, model=object())._validate()
    with pytest.raises(ValueError, match='KerasEstimator needs loss'):
        make_estimator(store, loss=None)._validate()
    with pytest.raises(ValueError, match='tensorflow_dataset_prefetch_buffer_size must be a non-negative integer'):
        make_estimator(store, tensorflow_dataset_prefetch_buffer_size=-1)._validate()
    with pytest.raises(ValueError, match='checkpoint_callback must be a ModelCheckpoint'):
        make_estimator(store, checkpoint_callback=keras.callbacks.Callback())._validate()
    with pytest.raises(TypeError, match='unexpected parameters: no_such'):
        make_estimator(store, no_such=1)
    with pytest.raises(ValueError, match='no_such_loss'):
        make_estimator(store, loss='no_such_loss')._validate()
    with pytest.raises(ValueError, match='The model has 1 inputs but 2 feature columns'):
        make_estimator(store, feature_cols=['features', 'other'])._validate()
    with pytest.raises(ValueError, match='label_shapes has 2 entries for 1 label columns'):
        make_estimator(store, label_shapes=[[1], [1]])._validate()
    with pytest.raises(ValueError, match=r'data_module=...\) must be a class with train_data\(\) and val_data\(\)'):
        make_estimator(store, data_module=3)._validate()
    assert make_estimator(store).setEpochs(7).getEpochs() == 7


@pytest.fixture(scope='module')
def store(tmp_path_factory):
    return LocalStore(str(tmp_path_factory.mktemp('keras_store')))


def top2(y_true, y_pred):
    """A metric given as a plain function (pickled to the processes with cloudpickle)."""
    return keras.metrics.sparse_top_k_categorical_accuracy(y_true, y_pred, k=2)


class EpochCounter(keras.callbacks.Callback):
    """Writes the epochs it saw on rank ``hvd.rank()`` into the history (through the logs)."""

    def on_epoch_end(self, epoch, logs=None):
        logs['seen_epoch'] = float(epoch)


def test_fit_transform_history_and_checkpoint(spark, digits, store):
    # Through a tf.data pipeline that prefetches 2 batches (the other tests feed a PyDataset).
    model = make_estimator(store, run_id='digits', callbacks=[EpochCounter()],
                           tensorflow_dataset_prefetch_buffer_size=2).fit(digits)
    assert isinstance(model, KerasModel) and isinstance(model.getModel(), keras.Model)
    history = model.getHistory()
    assert len(history['loss']) == 4 and len(history['val_loss']) == 4
    assert history['seen_epoch'] == [0.0, 1.0, 2.0, 3.0]
    assert history['loss'][-1] < history['loss'][0]
    assert history['val_accuracy'][-1] > 0.85, history
    with store.open(store.get_checkpoint_path('digits'), 'rb') as f:
        checkpoint = pickle.loads(f.read())
    assert checkpoint['epoch'] == 3 and checkpoint['history']['val_loss'] == history['val_loss']
    restored = store.read_serialized_keras_model(store.get_checkpoint_path('digits'), model.getModel())
    model.save(os.path.join(store.prefix_path, 'saved_model'))  # Spark ML persistence
    loaded = KerasModel.load(os.path.join(store.prefix_path, 'saved_model'))
    assert loaded.getFeatureColumns() == ['features'] and loaded.getHistory() == history
    assert all((a == b).all() for a, b in zip(loaded.getModel().get_weights(), model.getModel().get_weights()))
    assert [w.shape for w in restored.get_weights()] == [w.shape for w in model.getModel().get_weights()]
    assert not store.exists(store.get_train_data_path(0))
    assert transformed_accuracy(model, digits) > 0.85


def test_resume_with_checkpoint_callback_and_sample_weights(spark, digits, store):
    """Same run_id as above: its checkpoint (epochs 0-3 done) is resumed, so epochs=6 trains
    two more, validating on the rows flagged in is_val; BestModelCheckpoint picks the model
    that is returned."""
    from pyspark.sql import functions as F
    with store.open(store.get_checkpoint_path('digits'), 'rb') as f:
        checkpoint_before = pickle.loads(f.read())
    df = (digits.withColumn('is_val', F.monotonically_increasing_id() % 5 == 0)
          .withColumn('weight', F.lit(1.0)))
    with prepare_data(2, store, df, label_columns=['label'], feature_columns=['features'], validation='is_val',
                      sample_weight_col='weight', partitions_per_process=2) as idx:
        estimator = make_estimator(store, run_id='digits', epochs=6, validation=None, sample_weight_col='weight',
                                   loss=keras.losses.SparseCategoricalCrossentropy(), metrics=['accuracy', top2],
                                   checkpoint_callback=hvd_keras.callbacks.BestModelCheckpoint(monitor='val_loss'))
        model = estimator.fit_on_parquet(dataset_idx=idx)
    history = model.getHistory()
    assert len(history['loss']) == 6 and len(history['val_loss']) == 6
    assert history['loss'][:4] == checkpoint_before['history']['loss']
    assert len(history['top2']) == 2 and history['val_top2'][-1] > 0.9, history
    assert driver_accuracy(model) > 0.85


def test_features_that_do_not_fit_the_model_fail_before_training(spark, digits, tmp_path):
    store = LocalStore(str(tmp_path))
    with pytest.raises(ValueError, match=r"feature column 'features' \(model input 0\) has 64 values per row, "
                                         r"which do not fit shape \(10,\)"):
        make_estimator(store, model=digits_model(keras, (10,)), validation=None).fit(digits)
    assert not store.exists(store.get_runs_path())


def test_tf_keras_model_with_image_input(spark, digits, tmp_path):
    """A tf-keras model whose input is 8x8: the 64-element feature vectors are reshaped to it."""
    tf_keras = pytest.importorskip('tf_keras')
    model = make_estimator(LocalStore(str(tmp_path)), keras_module=tf_keras, model=digits_model(tf_keras, (8, 8)),
                           epochs=3, validation=None, use_gpu=False).fit(digits)
    assert isinstance(model.getModel(), tf_keras.Model)
    assert model.getHistory()['accuracy'][-1] > 0.85
    assert driver_accuracy(model) > 0.85


def test_custom_data_module(spark, digits, tmp_path):
    """data_module: a DataModule subclass whose train_data() / val_data() generators feed
    model.fit (every label shifted by one: the model learns the shifted digit), constructed in
    every process with Horovod's arguments."""
    import json

    import numpy as np
    from horovod.spark.common.datamodule import DataModule
    folder = str(tmp_path)

    class ShiftedLabels(DataModule):
        def __enter__(self):
            with open(os.path.join(folder, 'dm{}'.format(self.cur_shard)), 'w') as f:
                json.dump(dict(shard_count=self.shard_count, steps=self.steps_per_epoch_train,
                               label_cols=self.label_cols), f)
            self.readers = [self.shard_reader(train=True), self.shard_reader(train=False)]
            return self

        def __exit__(self, *exc):
            for reader in self.readers:
                reader.close()

        def _batches(self, reader, batch_size):
            while True:
                for batch in reader.epoch(reader.rows, batch_size):
                    yield batch['features'], (batch['label'] + 1) % 10

        def train_data(self):
            return self._batches(self.readers[0], self.train_batch_size)

        def val_data(self):
            return self._batches(self.readers[1], self.val_batch_size)

    model = make_estimator(LocalStore(str(tmp_path / 'store')), data_module=ShiftedLabels, epochs=3).fit(digits)
    history = model.getHistory()
    assert len(history['loss']) == 3 and history['val_accuracy'][-1] > 0.8, history
    for rank in (0, 1):
        arguments = json.loads((tmp_path / 'dm{}'.format(rank)).read_text())
        assert arguments['shard_count'] == 2 and arguments['steps'] > 0 and arguments['label_cols'] == ['label']
    rows = model.setOutputCols(['p']).transform(digits).select('label', 'p').collect()
    assert sum(int(int(np.argmax(r['p'])) == (r['label'] + 1) % 10) for r in rows) / len(rows) > 0.8


def test_petastorm_data_module_by_name_is_the_default_feed():
    """Horovod's default Keras data module, passed by name, is the estimator's own feed; a
    subclass that reads nothing of its own says what to do."""
    from horovod.spark.keras.datamodule import PetastormDataModule, custom_module

    class Mine(PetastormDataModule):
        pass
    assert custom_module(None) is None and custom_module(PetastormDataModule) is None
    assert custom_module(Mine) is Mine
    with pytest.raises(NotImplementedError, match='subclass DataModule'):
        Mine(train_dir='t', val_dir=None).train_data()
