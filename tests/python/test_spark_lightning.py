"""horovod.spark.lightning's TorchEstimator / TorchModel on local[2] Spark with a LocalStore: a
linear-regression LightningModule trained on 2 Horovod processes (HorovodStrategy) converges
with the same weights on both ranks, validates on a fraction or a column, writes its
checkpoints and logs to the store, resumes from its checkpoint, stops early through a
Lightning callback, and transforms; bad parameters are errors naming them."""

import os
import sys

import pytest

pyspark = pytest.importorskip('pyspark')
torch = pytest.importorskip('torch')
pl = pytest.importorskip('pytorch_lightning')
import cloudpickle  # noqa: E402

from horovod.spark.common.store import LocalStore  # noqa: E402
from horovod.spark.lightning import TorchEstimator, TorchModel  # noqa: E402

pytestmark = pytest.mark.timeout(300)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

WEIGHTS, BIAS = [3.0, -2.0], 0.5


class LinearRegression(pl.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.lr = lr
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, features):
        return self.linear(features)

    def _loss(self, batch):
        return torch.nn.functional.mse_loss(self(batch['features']).view(-1), batch['y'])

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log('train_loss', loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log('val_loss', self._loss(batch), on_epoch=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class SaveWeights(pl.Callback):
    """Every rank writes its final weights to ``directory``/rank<r>.pt."""

    def __init__(self, directory):
        self.directory = directory

    def on_train_end(self, trainer, pl_module):
        torch.save({k: v.clone() for k, v in pl_module.state_dict().items()},
                   os.path.join(self.directory, 'rank{}.pt'.format(trainer.global_rank)))


@pytest.fixture(scope='module')
def regression(spark):
    import random
    rng = random.Random(0)
    rows = []
    for _ in range(1200):
        x = [rng.uniform(-1, 1), rng.uniform(-1, 1)]
        y = WEIGHTS[0] * x[0] + WEIGHTS[1] * x[1] + BIAS + rng.gauss(0, 0.01)
        rows.append((x, y))
    return spark.createDataFrame(rows, 'features array<double>, y double')


def make_estimator(store, **overrides):
    torch.manual_seed(0)
    settings = dict(num_proc=2, store=store, model=LinearRegression(), feature_cols=['features'], label_cols=['y'],
                    validation=0.2, batch_size=16, epochs=6, random_seed=1, verbose=0)
    settings.update(overrides)
    return TorchEstimator(**settings)


def test_bad_parameters(tmp_path):
    store = LocalStore(str(tmp_path))
    model = LinearRegression()
    with pytest.raises(TypeError, match='unexpected parameters: no_such'):
        make_estimator(store, no_such=1)
    with pytest.raises(ValueError, match=r'optimizer=.*configure_optimizers'):
        make_estimator(store, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))._validate()
    with pytest.raises(ValueError, match=r'loss=.*training_step'):
        make_estimator(store, loss=torch.nn.functional.mse_loss)._validate()
    with pytest.raises(ValueError, match='must be a pytorch_lightning.LightningModule'):
        make_estimator(store, model=torch.nn.Linear(2, 1))._validate()
    with pytest.raises(ValueError, match=r"trainer_args=\{'max_epochs'.*use epochs"):
        make_estimator(store, trainer_args={'max_epochs': 3})._validate()
    with pytest.raises(ValueError, match=r"trainer_args=\{'no_such_arg'.*not an argument"):
        make_estimator(store, trainer_args={'no_such_arg': 3})._validate()
    with pytest.raises(NotImplementedError, match=r'num_gpus=1.*needs GPU training'):
        make_estimator(store, num_gpus=1)._validate()
    make_estimator(store, num_gpus=0)._validate()
    with pytest.raises(NotImplementedError, match=r'loader_num_epochs=.*needs'):
        make_estimator(store, loader_num_epochs=2)._validate()
    with pytest.raises(ValueError, match=r'callbacks=.*not a pytorch_lightning.Callback'):
        make_estimator(store, callbacks=[object()])._validate()
    with pytest.raises(ValueError, match=r'logger=.*must be a pytorch_lightning logger'):
        make_estimator(store, logger='csv')._validate()
    with pytest.raises(ValueError, match=r'batch_size=0.* positive integer'):
        make_estimator(store, batch_size=0)._validate()
    with pytest.raises(ValueError, match='needs store'):
        make_estimator(None)._validate()


def test_fit_converges_checkpoints_and_transforms(spark, regression, tmp_path):
    store = LocalStore(str(tmp_path / 'store'))
    weights_dir = tmp_path / 'weights'
    weights_dir.mkdir()
    estimator = make_estimator(store, run_id='linear', callbacks=[SaveWeights(str(weights_dir))])
    model = estimator.fit(regression)
    assert isinstance(model, TorchModel)

    history = model.getHistory()
    assert len(history['train_loss']) == 6 and len(history['val_loss']) == 6, history
    assert history['train_loss'][-1] < 0.01 * history['train_loss'][0], history
    assert history['val_loss'][-1] < 0.01, history

    # Both ranks end with the same weights (rank 0's broadcast at the start, averaged gradients
    # after), close to the generating ones.
    rank0, rank1 = (torch.load(str(weights_dir / 'rank{}.pt'.format(r))) for r in (0, 1))
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
    assert torch.allclose(rank0['linear.weight'], torch.tensor([WEIGHTS]), atol=0.05), rank0
    trained = model.getModel().state_dict()
    assert torch.allclose(trained['linear.weight'], rank0['linear.weight'], atol=1e-6)

    # Checkpoints and logs in the store.
    assert store.exists(store.get_checkpoint_path('linear'))
    with store.open(store.get_checkpoint_path('linear'), 'rb') as f:
        checkpoint = torch.load(f, weights_only=False)
    assert checkpoint['epoch'] == 5 and 'state_dict' in checkpoint
    assert model.getBestModelPath() and store.exists(model.getBestModelPath())
    assert store.exists(os.path.join(store.get_logs_path('linear'), 'metrics.csv'))
    assert not store.exists(store.get_train_data_path(0))

    predicted = model.setOutputCols(['prediction']).transform(regression)
    assert predicted.columns == ['features', 'y', 'prediction']
    rows = predicted.collect()
    assert len(rows) == 1200
    assert max(abs(r['prediction'] - r['y']) for r in rows) < 0.2

    # The same run_id resumes from the store's checkpoint: epochs=8 trains epochs 6 and 7 only,
    # continuing the history.
    resumed = make_estimator(store, run_id='linear', epochs=8).fit(regression).getHistory()
    assert len(resumed['train_loss']) == 8 and resumed['train_loss'][:6] == history['train_loss'], resumed
    with store.open(store.get_checkpoint_path('linear'), 'rb') as f:
        assert torch.load(f, weights_only=False)['epoch'] == 7


def test_early_stopping_callback_and_validation_column(spark, regression, tmp_path):
    """EarlyStopping on val_loss with an impossible min_delta stops after its patience; the
    validation rows are those flagged in a column."""
    from pyspark.sql import functions as F
    from pytorch_lightning.callbacks import EarlyStopping
    df = regression.withColumn('is_val', F.rand(seed=3) < 0.25)
    store = LocalStore(str(tmp_path / 'store'))
    stop = EarlyStopping(monitor='val_loss', min_delta=1e9, patience=1, mode='min')
    model = make_estimator(store, epochs=10, validation='is_val', callbacks=[stop], logger=False).fit(df)
    history = model.getHistory()
    assert len(history['val_loss']) == 2, history


def _strategy_collectives():
    import horovod.torch as hvd
    from horovod.spark.lightning import HorovodStrategy
    from torch.distributed import ReduceOp
    hvd.init()
    strategy = HorovodStrategy()
    rank = torch.tensor(float(hvd.rank()))
    return dict(
        ranks=(strategy.global_rank, strategy.world_size, strategy.is_global_zero),
        mean=strategy.reduce(rank).item(), sum=strategy.reduce(rank, reduce_op='sum').item(),
        max=strategy.reduce(rank, reduce_op=ReduceOp.MAX).item(), not_tensor=strategy.reduce('x'),
        gathered=strategy.all_gather(torch.tensor([hvd.rank(), 10 + hvd.rank()])).tolist(),
        broadcast=strategy.broadcast({'from': hvd.rank()}, src=1),
        all_=strategy.reduce_boolean_decision(hvd.rank() == 0, all=True),
        any_=strategy.reduce_boolean_decision(hvd.rank() == 0, all=False),
        barrier=strategy.barrier('test'))


def test_strategy_collectives_are_horovod(spark):
    import horovod.spark
    results = horovod.spark.run(_strategy_collectives, num_proc=2)
    for rank, result in enumerate(results):
        assert result['ranks'] == (rank, 2, rank == 0)
        assert result['mean'] == 0.5 and result['sum'] == 1.0 and result['max'] == 1.0
        assert result['not_tensor'] == 'x'
        assert result['gathered'] == [[0, 10], [1, 11]]
        assert result['broadcast'] == {'from': 1}
        assert result['all_'] is False and result['any_'] is True


def test_custom_data_module(spark, regression, tmp_path):
    """data_module: a ShardDataModule subclass, constructed in every process with Horovod's
    arguments, whose dataloaders add 5 to every target: the module learns a bias 5 higher."""
    import json
    from horovod.spark.lightning.datamodule import ShardDataModule
    folder = str(tmp_path)

    class Shifted:
        def __init__(self, loader):
            self.loader = loader

        def __len__(self):
            return len(self.loader)

        def __iter__(self):
            for batch in self.loader:
                yield dict(batch, y=batch['y'] + 5)

    class ShiftedTargets(ShardDataModule):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with open(os.path.join(folder, 'dm{}'.format(kwargs['cur_shard'])), 'w') as f:
                json.dump({k: kwargs[k] for k in ('shard_count', 'schema_fields', 'steps_per_epoch_train',
                                                  'has_val', 'train_batch_size')}, f)

        def train_dataloader(self):
            return Shifted(super().train_dataloader())

        def val_dataloader(self):
            return Shifted(super().val_dataloader())

    with pytest.raises(ValueError, match='must be a pytorch_lightning.LightningDataModule subclass'):
        make_estimator(LocalStore(folder), data_module=SaveWeights)._validate()
    model = make_estimator(LocalStore(str(tmp_path / 'store')), data_module=ShiftedTargets).fit(regression)
    bias = model.getModel().state_dict()['linear.bias'].item()
    assert abs(bias - (BIAS + 5)) < 0.1, bias
    assert model.getHistory()['val_loss'][-1] < 0.01, model.getHistory()
    for rank in (0, 1):
        arguments = json.loads((tmp_path / 'dm{}'.format(rank)).read_text())
        assert arguments['shard_count'] == 2 and arguments['schema_fields'] == ['features', 'y']
        assert arguments['has_val'] and arguments['train_batch_size'] == 16 and arguments['steps_per_epoch_train'] > 0
