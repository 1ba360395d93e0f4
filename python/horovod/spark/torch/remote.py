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
        from horovod.spark.common.reader import BatchStream, ShardReader, epoch_rows
        from horovod.spark.data_loaders.pytorch_data_loaders import PytorchShardLoader

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

        def loader(path, batch_size, options, what, steps):
            # Every rank goes through as many rows per epoch as the largest shard has, so that
            # all ranks take the same number of steps and every row is used each epoch.
            reader = ShardReader(spec.store, path, spec.columns, hvd.rank(), hvd.size(),
                                 seed=(spec.random_seed or 0) + hvd.rank(), **options)
            total = epoch_rows(hvd.allgather(torch.tensor([reader.rows]), name=what + '_rows').tolist(), what)
            return PytorchShardLoader(BatchStream(reader, total, batch_size, steps))

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

        train_data = loader(spec.train_path, spec.batch_size, spec.readers['train'], 'training',
                            spec.train_steps_per_epoch)
        val_data = (loader(spec.val_path, spec.val_batch_size, spec.readers['val'], 'validation',
                           spec.validation_steps_per_epoch) if spec.val_path else None)
        sums = {}

        def record(prefix, total, count):
            history[prefix + 'loss'].append(hvd.allreduce(torch.tensor(total / max(count, 1)),
                                                          name=prefix + 'loss').item())
            for name, value in sorted(sums.items()):
                history.setdefault(prefix + name, []).append(
                    hvd.allreduce(torch.tensor(value / max(count, 1)), name=prefix + name).item())
            sums.clear()

        for epoch in range(start_epoch, spec.epochs):
            model.train()
            total, count = 0.0, 0
            for batch in train_data:
                inputs, labels, sample_weights = split(batch)
                outputs, loss = train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels,
                                                sample_weights)
                measure(*transform_outputs(outputs, labels))
                total, count = total + (loss.item() if torch.is_tensor(loss) else float(loss)), count + 1
            record('', total, count)
            if val_data is not None:
                model.eval()
                total, count = 0.0, 0
                with torch.no_grad():
                    for batch in val_data:
                        inputs, labels, sample_weights = split(batch)
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
                    torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'epoch': epoch,
                                'history': history}, buffer)
                    with spec.store.open(spec.checkpoint_path, 'wb') as f:
                        f.write(buffer.getvalue())
        for data in (train_data, val_data):
            if data is not None:
                data.stream.close()
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
