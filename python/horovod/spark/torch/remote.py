"""The training function that TorchEstimator runs in every Horovod process (through the
backend): read this rank's shard, train with DistributedOptimizer, validate, checkpoint on rank
0, and return the history and (rank 0) the trained weights."""

import io

__all__ = ['make_train_fn']


def make_train_fn(spec):
    """``spec`` is a TrainSpec (estimator.py): everything pickled to the processes."""

    def train():
        import cloudpickle
        import torch
        import horovod.torch as hvd

        hvd.init()
        if spec.random_seed is not None:
            torch.manual_seed(spec.random_seed)
        model = cloudpickle.loads(spec.model_bytes)
        losses = [make() for make in spec.loss_constructors] if spec.loss_constructors else spec.losses
        optimizer = spec.optimizer_cls(model.parameters(), **spec.optimizer_defaults)
        optimizer.load_state_dict(spec.optimizer_state)
        start_epoch, history = 0, {'loss': [], 'val_loss': []}
        if spec.resume_checkpoint is not None:
            checkpoint = torch.load(io.BytesIO(spec.resume_checkpoint), weights_only=False)
            model.load_state_dict(checkpoint['model'])
            optimizer.load_state_dict(checkpoint['optimizer'])
            start_epoch, history = checkpoint['epoch'] + 1, checkpoint['history']
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             backward_passes_per_step=spec.backward_passes_per_step,
                                             compression=spec.compression or hvd.Compression.none)

        dm, (steps, val_steps) = _data_module(spec, hvd)
        batch_columns = _batch_columns_fn(spec, type(dm).__name__)

        def split(columns):
            """(inputs, labels, sample weights or None) of a batch, reshaped as configured."""
            batch = [columns[c] for c in spec.columns]
            n_features, n_labels = len(spec.feature_cols), len(spec.label_cols)
            inputs = [t.view(-1, *shape) if shape else t for t, shape in zip(batch[:n_features], spec.input_shapes)]
            labels = [t.view(-1, *shape) if shape else t
                      for t, shape in zip(batch[n_features:n_features + n_labels], spec.label_shapes)]
            return inputs, labels, (batch[n_features + n_labels] if spec.sample_weight_col else None)

        def transform_outputs(outputs, labels):
            """The model's outputs as a list, and each float label shaped like its (N, 1) output."""
            outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
            labels = [label.view(-1, 1) if label.dtype.is_floating_point and output.dim() == 2 and
                      output.shape[1] == 1 and label.dim() == 1 else label for output, label in zip(outputs, labels)]
            return outputs, labels

        def loss_fn(outputs, labels, sample_weights):
            """The weighted sum of the losses, one per output (sample-weighted when given)."""
            total = 0.0
            for output, label, loss, weight in zip(outputs, labels, losses, spec.loss_weights):
                if sample_weights is None:
                    value = loss(output, label)
                else:
                    value = (loss(output, label, reduction='none').view(len(label), -1).mean(1) *
                             sample_weights).mean()
                total = total + weight * value
            return total

        def measure(outputs, labels):
            for metric in spec.metrics:
                sums[metric.__name__] = sums.get(metric.__name__, 0.0) + float(metric(outputs[0], labels[0]))

        train_minibatch = spec.train_minibatch_fn or _train_minibatch
        sums = {}

        def record(prefix, total, count):
            history[prefix + 'loss'].append(hvd.allreduce(torch.tensor(total / max(count, 1)),
                                                          name=prefix + 'loss').item())
            for name, value in sorted(sums.items()):
                history.setdefault(prefix + name, []).append(
                    hvd.allreduce(torch.tensor(value / max(count, 1)), name=prefix + name).item())
            sums.clear()

        callbacks = cloudpickle.loads(spec.callbacks)
        hooks = _Hooks(callbacks, model)
        logs = {}
        with dm:
            train_data = _Batches(dm.train_data(), type(dm).__name__ + '.train_data()')
            val_data = _Batches(dm.val_data(), type(dm).__name__ + '.val_data()') if spec.val_path else None
            hooks('on_train_begin', logs)
            for epoch in range(start_epoch, spec.epochs):
                hooks('on_epoch_begin', epoch, {})
                model.train()
                total, count = 0.0, 0
                for _ in range(steps):
                    inputs, labels, sample_weights = split(batch_columns(train_data.next()))
                    outputs, loss = train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels,
                                                    sample_weights)
                    measure(*transform_outputs(outputs, labels))
                    total, count = total + (loss.item() if torch.is_tensor(loss) else float(loss)), count + 1
                record('', total, count)
                if val_data is not None:
                    model.eval()
                    total, count = 0.0, 0
                    with torch.no_grad():
                        for _ in range(val_steps):
                            inputs, labels, sample_weights = split(batch_columns(val_data.next()))
                            outputs, labels = transform_outputs(model(*inputs), labels)
                            measure(outputs, labels)
                            total, count = total + float(loss_fn(outputs, labels, sample_weights)), count + 1
                    record('val_', total, count)
                if hvd.rank() == 0:
                    if spec.verbose:
                        print('epoch {}: {}'.format(epoch, ', '.join('{} {:.4f}'.format(k, v[-1])
                                                                     for k, v in history.items() if v)), flush=True)
                    if spec.checkpoint_path:
                        buffer = io.BytesIO()
                        torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(),
                                    'epoch': epoch, 'history': history}, buffer)
                        with spec.store.open(spec.checkpoint_path, 'wb') as f:
                            f.write(buffer.getvalue())
                logs = {k: v[-1] for k, v in history.items() if v}
                hooks('on_epoch_end', epoch, logs)
                # Every rank stops together when a callback on any rank asked to.
                asked = any(getattr(c, 'stop_training', False) for c in callbacks)
                if hvd.allreduce(torch.tensor(int(asked)), op=hvd.Max, name='callbacks.stop_training').item():
                    break
            hooks('on_train_end', logs)
        if hvd.rank() != 0:
            return None
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        return {'history': history, 'state_dict': buffer.getvalue()}

    return train


def _train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights):
    """One training step, Horovod's default ``train_minibatch_fn`` (a custom one takes the same
    arguments and returns the same (outputs, loss)): gradients zeroed, forward,
    ``transform_outputs(outputs, labels)``, ``loss_fn(outputs, labels, sample_weights)``,
    backward, ``optimizer.step()``."""
    optimizer.zero_grad()
    outputs = model(*inputs)
    outputs, labels = transform_outputs(outputs, labels)
    loss = loss_fn(outputs, labels, sample_weights)
    loss.backward()
    optimizer.step()
    return outputs, loss


def _data_module(spec, hvd):
    """(the data module, (training steps, validation steps) per epoch): the spec's
    ``data_module`` class (default ShardDataModule) constructed with Horovod's arguments
    (horovod.spark.common.datamodule) for this rank."""
    import torch
    from horovod.spark.common.datamodule import construct, steps_per_epoch
    from horovod.spark.common.reader import epoch_rows, shard_rows
    from horovod.spark.torch.datamodule import ShardDataModule

    def rows(path, what):
        mine = shard_rows(spec.store, path, hvd.rank(), hvd.size())
        return hvd.allgather(torch.tensor([mine]), name=what + '_rows').tolist()
    train_rows = rows(spec.train_path, 'training')
    val_rows = rows(spec.val_path, 'validation') if spec.val_path else None
    steps = steps_per_epoch(train_rows, spec.batch_size, spec.train_steps_per_epoch, 'training')
    val_steps = (steps_per_epoch(val_rows, spec.val_batch_size, spec.validation_steps_per_epoch, 'validation')
                 if val_rows else 0)
    arguments = dict(
        label_cols=spec.label_cols, continuous_cols=spec.continuous_cols, categorical_cols=spec.categorical_cols,
        random_seed=spec.random_seed, train_dir=spec.train_path, val_dir=spec.val_path,
        num_train_epochs=spec.epochs, has_val=spec.val_path is not None, train_batch_size=spec.batch_size,
        val_batch_size=spec.val_batch_size, shuffle=spec.shuffle, reader_pool_type=spec.readers['train']['pool_type'],
        train_reader_worker_count=spec.readers['train']['num_workers'],
        val_reader_worker_count=spec.readers['val']['num_workers'], transform_fn=spec.transformation_fn,
        inmemory_cache_all=spec.readers['train']['inmemory_cache_all'], cur_shard=hvd.rank(),
        shard_count=hvd.size(), schema_fields=list(spec.columns), storage_options=spec.store.storage_options,
        steps_per_epoch_train=steps, steps_per_epoch_val=val_steps, verbose=spec.verbose)
    extras = dict(store=spec.store, reader_options=spec.readers, train_epoch_rows=epoch_rows(train_rows, 'training'),
                  val_epoch_rows=epoch_rows(val_rows, 'validation') if val_rows else None)
    return construct(spec.data_module or ShardDataModule, arguments, extras), (steps, val_steps)

class _Batches:
    """Batches taken one at a time from a data module's ``train_data()`` / ``val_data()``
    (``what``): a new pass (``iter()`` again) when the iterable ends; a pass with no batch at
    all is an error naming it."""

    def __init__(self, data, what):
        if data is None or not hasattr(data, '__iter__'):
            raise ValueError('{} must return an iterable of batches, got {!r}'.format(what, data))
        self.data, self.what, self.iterator = data, what, iter(data)

    def next(self):
        try:
            return next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.data)
            try:
                return next(self.iterator)
            except StopIteration:
                raise ValueError('{} gave no batches'.format(self.what)) from None


def _batch_columns_fn(spec, module_name):
    """A function of a data module's batch -> {column: tensor} over ``spec.columns``: a batch is
    a dict of columns or a (features, labels) pair (torch/datamodule.py)."""
    import torch

    def batch_columns(batch):
        if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[0], dict):
            features, labels = batch
            columns = dict(features)
            if isinstance(labels, dict):
                columns.update(labels)
            elif isinstance(labels, (tuple, list)):
                if len(labels) != len(spec.label_cols):
                    raise ValueError('{}: a batch has {} labels for the label columns {}'.format(
                        module_name, len(labels), spec.label_cols))
                columns.update(zip(spec.label_cols, labels))
            elif len(spec.label_cols) == 1:
                columns[spec.label_cols[0]] = labels
            else:
                raise ValueError('{}: a batch\'s labels are one value for the label columns {}: give a list or '
                                 'a dict'.format(module_name, spec.label_cols))
        elif isinstance(batch, dict):
            columns = batch
        else:
            raise ValueError('{}: a batch must be a dict {{column: tensor}} or a (features, labels) pair, got '
                             '{}'.format(module_name, type(batch).__name__))
        missing = [c for c in spec.columns if c not in columns]
        if missing:
            raise ValueError('{}: a batch lacks the columns {} (it has {})'.format(
                module_name, missing, sorted(columns)))
        return {c: torch.as_tensor(columns[c]) for c in spec.columns}

    return batch_columns


class _Hooks:
    """Calls a hook on every callback that defines it (TorchEstimator's callback protocol:
    optional ``set_model(model)``, ``on_train_begin(logs)``, ``on_epoch_begin(epoch, logs)``,
    ``on_epoch_end(epoch, logs)``, ``on_train_end(logs)``; see docs/spark.md)."""

    def __init__(self, callbacks, model):
        self.callbacks = callbacks
        for callback in callbacks:
            if hasattr(callback, 'set_model'):
                callback.set_model(model)

    def __call__(self, name, *args):
        for callback in self.callbacks:
            hook = getattr(callback, name, None)
            if hook is not None:
                hook(*args)
