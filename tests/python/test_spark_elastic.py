"""horovod.spark.run_elastic on a real local Spark (``local[2]``, one session for the file): a
worker's process dies mid-training and a replacement task joins; min_num_proc out of reach and
reset_limit exceeded are clear errors. Bounded by pytest-timeout."""

import sys
import time

import pytest

pyspark = pytest.importorskip('pyspark')
import cloudpickle  # noqa: E402

import horovod.spark  # noqa: E402

pytestmark = pytest.mark.timeout(240)
# The Horovod processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def elastic_train(marker, die_every_round=False, epochs=5):
    """Trains ``epochs`` epochs inside hvd.elastic.run, one step each. Rank 1 dies in epoch 2
    (once: the first to get there leaves ``marker``), or with ``die_every_round`` in every round
    from epoch 2 on. Returns its rank and
    size, (epoch, round, rank, size) per step, the steps counted in the state, the weights."""
    import os
    import torch
    import horovod.torch as hvd
    from horovod import _core
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, steps=0)
    seen = []

    @hvd.elastic.run
    def train(state):
        while state.epoch < epochs:
            state.steps += 1   # rolled back with the state when the step fails
            loss = model(torch.ones(4, 2) * (hvd.rank() + 1)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append((state.epoch, _core.elastic_host_updates()[0], hvd.rank(), hvd.size()))
            dies = state.epoch >= 2 if die_every_round else state.epoch == 2 and not os.path.exists(marker)
            if dies and hvd.rank() == 1:
                open(marker, 'w').close()
                os._exit(1)
            state.epoch += 1
            state.commit()

    train(state)
    return hvd.rank(), hvd.size(), seen, state.steps, [round(float(v), 6) for v in model.weight.detach().view(-1)]


def test_arguments_are_checked_before_spark():
    from pyspark import SparkContext
    assert SparkContext._active_spark_context is None
    with pytest.raises(Exception, match='Could not find an active SparkContext'):
        horovod.spark.run_elastic(elastic_train, num_proc=2)


@pytest.fixture(scope='module')
def spark():
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master('local[2]').appName('horovod-test-spark-elastic')
               .config('spark.ui.enabled', 'false').config('spark.ui.showConsoleProgress', 'false')
               .getOrCreate())
    session.sparkContext.setLogLevel('ERROR')
    yield session
    session.stop()


def no_active_jobs(context, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not context.statusTracker().getActiveJobsIds():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize('kwargs, pattern', [
    (dict(num_proc=2, min_num_proc=3), r'min_num_proc <= num_proc <= max_num_proc, got 3 <= 2 <= 2'),
    (dict(num_proc=2, max_num_proc=1), r'got 2 <= 2 <= 1'),
    (dict(num_proc=2, min_num_proc=1, min_np=2), 'min_num_proc and its alias min_np differ'),
    (dict(num_proc=2, min_num_proc=0), 'at least 1'),
    (dict(num_proc=2, reset_limit=-1), 'reset_limit must not be negative'),
])
def test_bad_arguments(spark, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        horovod.spark.run_elastic(elastic_train, **kwargs)


def test_lost_worker_is_replaced_and_training_resumes_from_the_commit(spark, tmp_path):
    marker = str(tmp_path / 'died')
    started = time.monotonic()
    results = horovod.spark.run_elastic(elastic_train, args=(marker,), num_proc=2, min_num_proc=1,
                                        elastic_timeout=60, start_timeout=60, verbose=2)
    print('elastic job took {:.1f} s'.format(time.monotonic() - started))
    import os
    assert os.path.exists(marker), 'rank 1 never died: the test did not test anything'
    assert [(rank, size) for rank, size, _, _, _ in results] == [(0, 2), (1, 2)]
    survivor, replacement = results[0][2], results[1][2]
    # Round 0 until rank 1 died in epoch 2; round 1 from epoch 3 (epoch 2 was committed).
    assert survivor == [(0, 0, 0, 2), (1, 0, 0, 2), (2, 0, 0, 2), (3, 1, 0, 2), (4, 1, 0, 2)]
    assert replacement == [(3, 1, 1, 2), (4, 1, 1, 2)]
    # The survivor's failed step in epoch 3 was rolled back (5 steps, not 6); the replacement got
    # the committed state from rank 0, and both end with the same weights.
    assert results[0][3] == results[1][3] == 5
    assert results[0][4] == results[1][4]
    assert no_active_jobs(spark.sparkContext)


def test_min_num_proc_out_of_reach_is_an_error_within_elastic_timeout(spark):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r'Timed out after 3.0 s waiting for 3 Horovod workers in Spark task slots '
                                           r'\(2 possible\): free task slots .* or lower min_num_proc') as info:
        horovod.spark.run_elastic(elastic_train, args=('unused',), num_proc=3, elastic_timeout=3)
    print(info.value)
    assert time.monotonic() - started < 15
    assert no_active_jobs(spark.sparkContext)


def test_reset_limit_exceeded_is_an_error(spark, tmp_path):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match='number of resets during elastic job exceeded limit: 1') as info:
        horovod.spark.run_elastic(elastic_train, args=(str(tmp_path / 'died'), True), num_proc=2, min_num_proc=1,
                                  reset_limit=1, elastic_timeout=60, start_timeout=60, verbose=2)
    print(info.value, '(after {:.1f} s)'.format(time.monotonic() - started))
    assert no_active_jobs(spark.sparkContext)
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6
