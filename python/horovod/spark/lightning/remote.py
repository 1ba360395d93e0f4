"""The training function that the Lightning estimator runs in every Horovod process (through the
backend): a Lightning ``Trainer`` with HorovodStrategy over a ShardDataModule of this rank's
shard; rank 0 keeps the checkpoints and logs in the store and returns the history and the
weights of the best (or last) checkpoint."""

import io
import os
import posixpath
import shutil
import tempfile
import warnings

from pytorch_lightning import Callback

__all__ = ['make_train_fn']

CHECKPOINTS_DIR = 'checkpoints'


def make_train_fn(spec):
    """``spec`` is a TrainSpec (estimator.py): everything pickled to the processes."""

    def train():
        import cloudpickle
        import pytorch_lightning as pl
        import torch
        from pytorch_lightning.callbacks import ModelCheckpoint
        from pytorch_lightning.loggers import CSVLogger

        import horovod.torch as hvd
        from horovod.spark.lightning.strategy import HorovodStrategy

        hvd.init()
        if spec.use_gpu and torch.cuda.is_available() and hvd.rank() == 0:
            warnings.warn('horovod.spark.lightning trains on the CPU in this build (use_gpu=True has no GPU to '
                          'use it with)')
        if spec.random_seed is not None:
            pl.seed_everything(spec.random_seed, verbose=False)
        model = cloudpickle.loads(spec.model_bytes)
        callbacks = cloudpickle.loads(spec.callbacks_bytes)
        work = tempfile.mkdtemp(prefix='hvd_lightning_')
        try:
            checkpoint_dir = os.path.join(work, CHECKPOINTS_DIR)
            checkpoint = next((c for c in callbacks if isinstance(c, ModelCheckpoint)), None)
            if checkpoint is None:
                checkpoint = ModelCheckpoint()  # monitor=None: keeps the latest epoch's
                callbacks.append(checkpoint)
            for c in callbacks:
                if isinstance(c, ModelCheckpoint):
                    c.dirpath = checkpoint_dir
            checkpoint.save_last = True
            history = _History()
            store_sync = _StoreSync(spec.store, spec.run_path, spec.checkpoint_path, checkpoint_dir, checkpoint)
            callbacks = callbacks + [history, store_sync]
            if spec.terminate_on_nan:
                callbacks.append(_TerminateOnNan())

            logs_dir = os.path.join(work, 'logs')
            if spec.logger is None:
                logger = CSVLogger(save_dir=logs_dir, name='', version='') if spec.logs_path else False
            else:
                logger = cloudpickle.loads(spec.logger)

            kwargs = dict(accelerator='cpu', strategy=HorovodStrategy(compression=spec.compression,
                                                   backward_passes_per_step=spec.backward_passes_per_step),
                          max_epochs=spec.epochs, callbacks=callbacks, logger=logger,
                          log_every_n_steps=spec.log_every_n_steps, num_sanity_val_steps=0,
                          use_distributed_sampler=False, profiler=spec.profiler,
                          accumulate_grad_batches=spec.backward_passes_per_step,
                          enable_progress_bar=bool(spec.verbose) and hvd.rank() == 0,
                          enable_model_summary=bool(spec.verbose) and hvd.rank() == 0, default_root_dir=work)
            if spec.val_path is None:
                kwargs['limit_val_batches'] = 0
            kwargs.update(spec.trainer_args or {})
            trainer = pl.Trainer(**kwargs)
            data = _data_module(spec, hvd)
            ckpt_path = None
            if spec.resume_checkpoint is not None:
                ckpt_path = os.path.join(work, 'resume.ckpt')
                with open(ckpt_path, 'wb') as f:
                    f.write(spec.resume_checkpoint)
            trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)

            if hvd.rank() != 0:
                return None
            store_sync.sync()
            if logger is not False and spec.logger is None:
                _upload_tree(spec.store, logs_dir, spec.logs_path)
            best = checkpoint.best_model_path or checkpoint.last_model_path
            if best and os.path.exists(best):
                state = torch.load(best, map_location='cpu', weights_only=False)['state_dict']
            else:  # nothing saved (e.g. a resumed run already at its last epoch)
                state = model.state_dict()
            buffer = io.BytesIO()
            torch.save({k: v.cpu() for k, v in state.items()}, buffer)
            return {'history': history.history, 'state_dict': buffer.getvalue(),
                    'best_model_path': posixpath.join(spec.run_path, CHECKPOINTS_DIR, os.path.basename(best))
                    if best and spec.run_path else None}
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return train


def _data_module(spec, hvd):
    """The spec's ``data_module`` class (default ShardDataModule) constructed with Horovod's
    arguments for this rank (datamodule.py), with the steps per epoch every rank takes."""
    import torch
    from horovod.spark.common.datamodule import construct, steps_per_epoch
    from horovod.spark.common.reader import epoch_rows, shard_rows
    from horovod.spark.lightning.datamodule import ShardDataModule

    def rows(path, what):
        mine = shard_rows(spec.store, path, hvd.rank(), hvd.size())
        return hvd.allgather(torch.tensor([mine]), name='lightning_' + what + '_rows').tolist()
    train_rows = rows(spec.train_path, 'training')
    val_rows = rows(spec.val_path, 'validation') if spec.val_path else None
    train = spec.readers['train']
    transform = train['transform']
    arguments = dict(
        train_dir=spec.train_path, val_dir=spec.val_path, num_train_epochs=spec.epochs,
        has_val=spec.val_path is not None, train_batch_size=spec.batch_size, val_batch_size=spec.val_batch_size,
        shuffle=train['shuffle'], num_reader_epochs=None, reader_pool_type=train['pool_type'],
        reader_worker_count=train['num_workers'], transformation=transform.fn if transform else None,
        transformation_edit_fields=transform.edit_fields if transform else None,
        transformation_removed_fields=transform.removed_fields if transform else None,
        inmemory_cache_all=train['inmemory_cache_all'], cur_shard=hvd.rank(), shard_count=hvd.size(),
        schema_fields=list(spec.columns), storage_options=spec.store.storage_options,
        steps_per_epoch_train=steps_per_epoch(train_rows, spec.batch_size, spec.train_steps_per_epoch, 'training'),
        steps_per_epoch_val=(steps_per_epoch(val_rows, spec.val_batch_size, spec.validation_steps_per_epoch,
                                             'validation') if val_rows else 0),
        verbose=bool(spec.verbose), debug_data_loader=spec.debug_data_loader,
        train_async_data_loader_queue_size=spec.train_queue_size,
        val_async_data_loader_queue_size=spec.val_queue_size, seed=spec.random_seed)
    extras = dict(store=spec.store, reader_options=spec.readers, shapes=spec.shapes, label_cols=spec.label_cols,
                  continuous_cols=spec.continuous_cols, categorical_cols=spec.categorical_cols,
                  train_epoch_rows=epoch_rows(train_rows, 'training'),
                  val_epoch_rows=epoch_rows(val_rows, 'validation') if val_rows else None)
    return construct(spec.data_module or ShardDataModule, arguments, extras)


class _History(Callback):
    """{metric: [value per epoch]} from trainer.callback_metrics at the end of every training
    epoch (after validation). Kept in the checkpoint, so a resumed run continues it."""

    def __init__(self):
        self.history = {}

    def on_train_epoch_end(self, trainer, pl_module):
        for name, value in sorted(trainer.callback_metrics.items()):
            try:
                value = float(value)
            except (TypeError, ValueError):
                continue
            self.history.setdefault(name, []).append(value)

    def state_dict(self):
        return {'history': self.history}

    def load_state_dict(self, state_dict):
        self.history = dict(state_dict.get('history', {}))


class _StoreSync(Callback):
    """Rank 0 copies the checkpoint callback's files to the store: every file to
    ``runs/<run_id>/checkpoints/``, and the last one (a full Lightning checkpoint) to the run's
    checkpoint path, which a later fit with the same run_id resumes from. Runs at the start of
    every epoch (after the previous epoch's checkpoint was written) and after fit."""

    def __init__(self, store, run_path, checkpoint_path, local_dir, checkpoint):
        self.store, self.run_path, self.checkpoint_path = store, run_path, checkpoint_path
        self.local_dir, self.checkpoint = local_dir, checkpoint

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.is_global_zero:
            self.sync()

    def sync(self):
        if self.run_path is None or not os.path.isdir(self.local_dir) or not os.listdir(self.local_dir):
            return  # nothing saved yet (e.g. the first epoch of a resumed run)
        remote = posixpath.join(self.run_path, CHECKPOINTS_DIR)
        self.store.remove(remote)  # the callback's top-k files replace the previous epoch's
        _upload_tree(self.store, self.local_dir, remote)
        last = self.checkpoint.last_model_path
        if self.checkpoint_path and last and os.path.exists(last):
            with open(last, 'rb') as src, self.store.open(self.checkpoint_path, 'wb') as dst:
                shutil.copyfileobj(src, dst)


class _TerminateOnNan(Callback):
    """terminate_on_nan: a ValueError on every rank when the training loss of a step is NaN or
    infinite on any rank (decided together, so that no rank waits on the others)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        import torch
        loss = outputs.get('loss') if isinstance(outputs, dict) else outputs
        bad = loss is not None and isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss).all())
        if trainer.strategy.reduce_boolean_decision(bad, all=False):
            raise ValueError('terminate_on_nan: the training loss is NaN or infinite at epoch {}, batch {}'.format(
                trainer.current_epoch, batch_idx))


def _upload_tree(store, local_dir, remote_dir):
    for root, _, files in os.walk(local_dir):
        for name in files:
            src = os.path.join(root, name)
            rel = os.path.relpath(src, local_dir).replace(os.sep, '/')
            with open(src, 'rb') as f, store.open(posixpath.join(remote_dir, rel), 'wb') as out:
                shutil.copyfileobj(f, out)
