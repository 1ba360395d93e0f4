"""The training function that KerasEstimator runs in every Horovod process (through the
backend): read this rank's shard, compile the model with DistributedOptimizer, ``model.fit``
with the broadcast and metric-averaging callbacks, checkpoint every epoch on rank 0, and return
the history and (rank 0) the trained model as ``.keras`` bytes."""

import os
import pickle
import tempfile

__all__ = ['make_train_fn']


def make_train_fn(spec):
    """``spec`` is a TrainSpec (estimator.py): everything pickled to the processes."""

    def train():
        import cloudpickle
        import numpy as np
        from horovod.spark.common.datamodule import tabular_types
        from horovod.spark.common.reader import BatchStream, ShardReader, epoch_rows
        from horovod.spark.keras import util

        if not spec.use_gpu:
            os.environ['CUDA_VISIBLE_DEVICES'] = '-1'  # before Keras (and its backend) is imported
        keras = util.import_keras(spec.flavour, spec.env)
        if spec.flavour == util.TF_KERAS:
            import horovod.tensorflow.keras as hvd
        else:
            import horovod.keras as hvd
        hvd.init()
        if spec.random_seed is not None:
            keras.utils.set_random_seed(spec.random_seed)
        custom_objects = cloudpickle.loads(spec.custom_objects)
        model, start_epoch, history = _compiled_model(keras, hvd, spec, custom_objects)

        shapes = util.input_shapes(model, len(spec.feature_cols))

        def to_keras(batch):
            batch = tabular_types(batch, spec.categorical_cols, spec.continuous_cols)
            inputs = [util.reshape(batch[c], shape, 'feature column {!r} (model input {})'.format(c, i))
                      for i, (c, shape) in enumerate(zip(spec.feature_cols, shapes))]
            labels = [util.reshape(batch[c], shape, 'label column {!r}'.format(c))
                      for c, shape in zip(spec.label_cols, spec.label_shapes)]
            x = inputs[0] if len(inputs) == 1 else tuple(inputs)
            y = labels[0] if len(labels) == 1 else tuple(labels)
            if not spec.sample_weight_col:
                return x, y
            return x, y, batch[spec.sample_weight_col].astype(np.float32)

        def stream(path, batch_size, options, steps, what):
            # Every rank goes through as many rows per epoch as the largest shard has, so that
            # all ranks take the same number of steps and every row is used each epoch.
            reader = ShardReader(spec.store, path, spec.columns, hvd.rank(), hvd.size(),
                                 seed=(spec.random_seed or 0) + 1000 * hvd.rank(), **options)
            rows = np.asarray(hvd.allgather(np.array([reader.rows], dtype=np.int64))).reshape(-1).tolist()
            return BatchStream(reader, epoch_rows(rows, what), batch_size, steps)

        if spec.data_module is None:
            streams = [stream(spec.train_path, spec.batch_size, spec.readers['train'], spec.train_steps_per_epoch,
                              'training')]
            if spec.val_path:
                streams.append(stream(spec.val_path, spec.val_batch_size, spec.readers['val'],
                                      spec.validation_steps_per_epoch, 'validation'))
            feeds = [_keras_feed(keras, s, to_keras, spec.prefetch) for s in streams]
            data = _DefaultData(feeds[0], feeds[1] if len(feeds) > 1 else None, streams)
            steps = {}
        else:
            data, steps = _data_module(spec, hvd)

        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
        callbacks += cloudpickle.loads(spec.callbacks)
        if hvd.rank() == 0 and spec.checkpoint_path:
            callbacks.append(_store_checkpoint_callback(keras, spec, history))
        with tempfile.TemporaryDirectory(prefix='hvd_keras_estimator_') as tmp:
            best = None
            if hvd.rank() == 0 and spec.checkpoint_callback is not None:
                best = cloudpickle.loads(spec.checkpoint_callback)
                best.filepath = os.path.join(tmp, 'best.weights.h5' if best.save_weights_only else 'best.keras')
                callbacks.append(best)
            with data as dm:
                fitted = model.fit(dm.train_data(), validation_data=dm.val_data() if spec.val_path else None,
                                   epochs=spec.epochs, initial_epoch=start_epoch,
                                   verbose=spec.verbose if hvd.rank() == 0 else 0, callbacks=callbacks, shuffle=False,
                                   **steps)
            for key, values in fitted.history.items():
                history.setdefault(key, []).extend(float(v) for v in values)
            if hvd.rank() != 0:
                return None
            if best is not None and os.path.exists(best.filepath):
                # The model checkpoint_callback saved last is the one returned.
                if best.save_weights_only:
                    model.load_weights(best.filepath)
                else:
                    model = keras.models.load_model(best.filepath, custom_objects=custom_objects, compile=False)
            return {'history': history, 'model': util.model_to_bytes(model)}

    return train


class _DefaultData:
    """The default data of ``model.fit``, shaped as a data module: the streamed feeds, whose
    streams close on exit."""

    def __init__(self, train, val, streams):
        self.train, self.val, self.streams = train, val, streams

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for stream in self.streams:
            stream.close()

    def train_data(self):
        return self.train

    def val_data(self):
        return self.val


def _data_module(spec, hvd):
    """(the data module, ``model.fit``'s steps arguments): the spec's ``data_module`` class
    constructed with Horovod's arguments for this rank (horovod.spark.common.datamodule), and the
    steps per epoch every rank takes from its ``train_data()`` / ``val_data()``."""
    import numpy as np
    from horovod.spark.common.datamodule import construct, steps_per_epoch
    from horovod.spark.common.reader import shard_rows

    def rows(path):
        mine = np.array([shard_rows(spec.store, path, hvd.rank(), hvd.size())], dtype=np.int64)
        return np.asarray(hvd.allgather(mine)).reshape(-1).tolist()
    steps = steps_per_epoch(rows(spec.train_path), spec.batch_size, spec.train_steps_per_epoch, 'training')
    val_steps = (steps_per_epoch(rows(spec.val_path), spec.val_batch_size, spec.validation_steps_per_epoch,
                                 'validation') if spec.val_path else None)
    train = spec.readers['train']
    transform = train['transform']
    arguments = dict(
        train_dir=spec.train_path, val_dir=spec.val_path, num_train_epochs=spec.epochs,
        has_val=spec.val_path is not None, train_batch_size=spec.batch_size, val_batch_size=spec.val_batch_size,
        shuffle=train['shuffle'], transform_fn=transform.fn if transform else None,
        inmemory_cache_all=train['inmemory_cache_all'], cur_shard=hvd.rank(), shard_count=hvd.size(),
        schema_fields=list(spec.columns), storage_options=spec.store.storage_options, steps_per_epoch_train=steps,
        steps_per_epoch_val=val_steps, verbose=spec.verbose, random_seed=spec.random_seed,
        reader_pool_type=train['pool_type'], train_reader_worker_count=train['num_workers'],
        val_reader_worker_count=spec.readers['val']['num_workers'], categorical_cols=spec.categorical_cols,
        continuous_cols=spec.continuous_cols, label_cols=list(spec.label_cols))
    extras = dict(store=spec.store, reader_options=spec.readers)
    module = construct(spec.data_module, arguments, extras)
    return module, dict(steps_per_epoch=steps, **({'validation_steps': val_steps} if val_steps else {}))


def _compiled_model(keras, hvd, spec, custom_objects):
    """(model, first epoch, history so far): the spec's model, or the checkpoint's with its
    optimizer state when resuming, compiled with DistributedOptimizer."""
    from horovod.spark.keras import util
    checkpoint = pickle.loads(spec.resume_checkpoint) if spec.resume_checkpoint is not None else None
    model = util.model_from_bytes(keras, checkpoint['model'] if checkpoint else spec.model_bytes, custom_objects)
    optimizer = hvd.DistributedOptimizer(
        keras.optimizers.deserialize(spec.optimizer_config, custom_objects=custom_objects),
        compression=spec.compression or hvd.Compression.none, backward_passes_per_step=spec.backward_passes_per_step)
    model.compile(optimizer=optimizer, loss=util.unpack_objects(keras, spec.loss, custom_objects),
                  loss_weights=spec.loss_weights, metrics=util.unpack_objects(keras, spec.metrics, custom_objects))
    if not checkpoint:
        return model, 0, {}
    _restore_optimizer(optimizer, model, checkpoint['optimizer'])
    return model, checkpoint['epoch'] + 1, checkpoint['history']


def _keras_feed(keras, stream, to_keras, prefetch):
    """What ``model.fit`` takes for a reader.BatchStream: each epoch is one ``iter(stream)``
    (``len(stream)`` batches, made model-ready by ``to_keras``). With ``prefetch`` > 0, a
    tf.data pipeline that prefetches that many batches (Horovod's
    ``tensorflow_dataset_prefetch_buffer_size``); else a Keras PyDataset (tf-keras: Sequence)."""
    if prefetch:
        import tensorflow as tf
        first = to_keras(next(iter(stream.reader.epoch(1, 1))))

        def spec_of(value):
            if isinstance(value, tuple):
                return tuple(spec_of(v) for v in value)
            return tf.TensorSpec((None,) + value.shape[1:], tf.as_dtype(value.dtype))
        data = tf.data.Dataset.from_generator(lambda: (to_keras(b) for b in stream), output_signature=spec_of(first))
        return data.prefetch(prefetch)
    base = getattr(keras.utils, 'PyDataset', None) or keras.utils.Sequence

    class Batches(base):
        """Batch ``i`` of the epoch, served in order from the stream. Keras may ask for a batch
        again (to learn the data's structure) and starts each epoch at 0; other orders (workers
        reading ahead) are refused."""

        def __init__(self):
            super().__init__()
            self.on_epoch_end()

        def __len__(self):
            return len(stream)

        def __getitem__(self, i):
            if i in self.served:
                return self.served[i]
            if i == 0:
                self.on_epoch_end()
            if i != self.next:
                raise RuntimeError('horovod.spark: Keras asked for batch {} where batch {} of the epoch comes next; '
                                   'the estimator streams its batches in order (no workers reading ahead)'.format(
                                       i, self.next))
            self.served = {i: to_keras(next(self.epoch))}
            self.next += 1
            return self.served[i]

        def on_epoch_end(self):
            self.epoch, self.served, self.next = iter(stream), {}, 0

    return Batches()


def _restore_optimizer(optimizer, model, values):
    """Builds ``optimizer`` for the model and sets its variables to the checkpoint's values
    (shapes must match one to one; otherwise the error names the mismatch)."""
    from horovod.spark.keras.util import variable_values
    optimizer.build(model.trainable_variables)
    variables = optimizer.variables
    variables = variables() if callable(variables) else variables
    current = variable_values(variables)
    if len(current) != len(values) or any(a.shape != b.shape for a, b in zip(current, values)):
        raise ValueError('The checkpoint\'s optimizer state ({} variables) does not fit the optimizer ({} '
                         'variables): was the optimizer changed since the run that wrote it? Use another run_id.'
                         .format(len(values), len(current)))
    for variable, value in zip(variables, values):
        variable.assign(value)


def _store_checkpoint_callback(keras, spec, history):
    """Rank 0: after every epoch, writes the model, the optimizer state, the epoch and the
    history so far (averaged over ranks: this callback runs after MetricAverageCallback) to the
    store's checkpoint file of the run."""
    from horovod.spark.keras.util import model_to_bytes, variable_values

    class StoreCheckpoint(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.so_far = {k: list(v) for k, v in history.items()}

        def on_epoch_end(self, epoch, logs=None):
            for key, value in (logs or {}).items():
                self.so_far.setdefault(key, []).append(float(value))
            variables = self.model.optimizer.variables
            variables = variables() if callable(variables) else variables
            state = {'model': model_to_bytes(self.model), 'optimizer': variable_values(variables), 'epoch': epoch,
                     'history': self.so_far}
            with spec.store.open(spec.checkpoint_path, 'wb') as f:
                f.write(pickle.dumps(state))

    return StoreCheckpoint()
