"""horovod.tensorflow in graphs, each test a job under ``horovodrun -np 2`` with a timeout:
TF1 mode for a whole process (tf1_session_worker.py: TF1 mode cannot be turned on inside the TF2
test process), and graphs of many independent Horovod ops with few inter-op threads
(tf_independent_ops_worker.py)."""

import os

import pytest
from launch_util import run_under_horovodrun

pytest.importorskip('tensorflow')

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))


def _run_under_horovodrun(args, env_extra):
    """(exit code, output) of `python ARGS` under horovodrun -np 2, bounded by TIMEOUT."""
    return run_under_horovodrun(args, TIMEOUT, env_extra)


def test_tf1_sessions_hooks_local_aggregation_and_state():
    rc, out = _run_under_horovodrun([os.path.join(HERE, 'tf1_session_worker.py')], {})
    assert rc == 0, out[-6000:]
    assert 'tf1 checks passed on 2 ranks' in out


@pytest.mark.parametrize('threads', [1, 2])
def test_independent_ops_created_in_different_orders_complete(threads, tmp_path):
    # 74 independent collectives per graph, each rank creating them in its own order, with one
    # or two inter-op threads: a TF1 session and a tf.function (autograph off). The timeline
    # (rank 0) shows the engine fused them.
    timeline = str(tmp_path / 'timeline.json')
    rc, out = _run_under_horovodrun([os.path.join(HERE, 'tf_independent_ops_worker.py'), str(threads)],
                                    {'HOROVOD_TIMELINE': timeline})
    assert rc == 0, out[-6000:]
    for rank in (0, 1):
        assert 'independent ops passed on rank {} with {} inter-op threads'.format(rank, threads) in out


def test_sync_kernels_switch_keeps_the_synchronous_way():
    # HOROVOD_TF_SYNC_KERNELS=1: kernels wait for their collective before returning (the way used
    # where the check of TensorFlow's done callback fails); ops with a data dependency chain work.
    script = '\n'.join([
        'import os, numpy as np, tensorflow as tf',
        'import horovod.tensorflow as hvd',
        'from horovod.tensorflow import _kernel_ops',
        'hvd.init()',
        'assert _kernel_ops.deferred_done is False, "HOROVOD_TF_SYNC_KERNELS=1 was ignored"',
        'f = tf.function(lambda x: hvd.allreduce(hvd.allgather(x), op=hvd.Sum), autograph=False)',
        'got = f(tf.fill([2], float(hvd.rank()))).numpy()',
        'assert np.allclose(got, [0, 0, 2, 2]), got',
        'print("sync kernels ok on rank", hvd.rank())',
    ])
    rc, out = _run_under_horovodrun(['-c', script], {'HOROVOD_TF_SYNC_KERNELS': '1'})
    assert rc == 0, out[-6000:]
    assert 'sync kernels ok on rank 0' in out and 'sync kernels ok on rank 1' in out
