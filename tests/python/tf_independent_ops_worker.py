"""Run by test_tensorflow_tf1.py under ``horovodrun -np 2``: many independent Horovod ops (no data
dependency between them) in one graph, created in a different order on each rank, evaluated in
one step with one or two TensorFlow inter-op threads: in TF1 sessions and in a tf.function with
autograph off. With kernels that held a thread while their collective waited for peers, the
ranks starved (each rank's threads waited in different ops). Checks every result, and that the
engine fused such ops (the timeline's fused_tensors).

    tf_independent_ops_worker.py THREADS     THREADS: the inter-op thread count (1 or 2)
Exits non-zero on the first failed check."""

import json
import os
import random
import sys

import numpy as np
import tensorflow as tf

THREADS = int(sys.argv[1])
# The eager context's pool (tf.function) must be sized before TensorFlow's first op.
tf.config.threading.set_inter_op_parallelism_threads(THREADS)

import horovod.tensorflow as hvd  # noqa: E402

DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
          tf.float32, tf.float64]
REDUCE_DTYPES = [tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64]


def check(condition, what):
    if not condition:
        raise SystemExit('rank {}: check failed: {}'.format(hvd.rank(), what))


def build_ops():
    """[(what, output, expected)] for 74 independent collectives (30 allgathers of 10 dtypes x 3
    ranks of tensor, 12 allreduces, 8 broadcasts, 4 alltoalls, 4 reducescatters, 3 grouped
    allreduces, one grouped allreduce of 5 IndexedSlices = 10 allgathers), created in an order
    that differs between ranks. Inputs carry explicit names: those name the collectives, so they
    match across ranks whatever the order of creation."""
    r, n = hvd.rank(), hvd.size()
    makers = []

    for dtype in DTYPES:
        for dims in (1, 2, 3):
            def gather(dtype=dtype, dims=dims):
                shape = [r + 1] + [2] * (dims - 1)
                x = tf.fill(shape, tf.cast(r + 1, dtype), name='g_{}_{}'.format(dtype.name, dims))
                want = np.concatenate([np.full([k + 1] + [2] * (dims - 1), k + 1) for k in range(n)])
                return 'allgather {} {}-D'.format(dtype.name, dims), hvd.allgather(x), want
            makers.append(gather)
    for dtype in REDUCE_DTYPES:
        for dims in (1, 2):
            def reduce(dtype=dtype, dims=dims):
                x = tf.fill([3] * dims, tf.cast(r + 1, dtype),
                            name='ar_{}_{}'.format(dtype.name, dims))
                want = np.full([3] * dims, n * (n + 1) // 2)
                return 'allreduce {} {}-D'.format(dtype.name, dims), hvd.allreduce(x, op=hvd.Sum), want
            makers.append(reduce)
    for i in range(8):
        def bcast(i=i):
            x = tf.fill([4], float(r * 10 + i), name='bc_{}'.format(i))
            root = i % n
            return 'broadcast {} root {}'.format(i, root), hvd.broadcast(x, root), np.full([4], root * 10.0 + i)
        makers.append(bcast)
    for i in range(4):
        def a2a(i=i):
            x = tf.fill([n * 2], float(r * 100 + i), name='a2a_{}'.format(i))
            out, _ = hvd.alltoall(x, splits=[2] * n)
            return 'alltoall {}'.format(i), out, np.repeat([k * 100.0 + i for k in range(n)], 2)
        makers.append(a2a)
    for i in range(4):
        def rs(i=i):
            x = tf.fill([n * 3, 2], float(r + 1 + i), name='rs_{}'.format(i))
            want = np.full([3, 2], sum(k + 1 + i for k in range(n)))
            return 'reducescatter {}'.format(i), hvd.reducescatter(x, op=hvd.Sum), want
        makers.append(rs)
    for i in range(3):
        def grouped(i=i):
            xs = [tf.fill([j + 1], float(r + i), name='gar_{}_{}'.format(i, j)) for j in range(3)]
            outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
            want = np.concatenate([np.full([j + 1], sum(k + i for k in range(n))) for j in range(3)])
            return 'grouped allreduce {}'.format(i), tf.concat(outs, 0), want
        makers.append(grouped)

    def sparse():
        slices = [tf.IndexedSlices(tf.fill([1, 2], float(r + j), name='sp_v_{}'.format(j)),
                                   tf.constant([r], tf.int64, name='sp_i_{}'.format(j)),
                                   dense_shape=tf.constant([n, 2], tf.int64))
                  for j in range(5)]
        outs = hvd.grouped_allreduce(slices, op=hvd.Sum)
        dense = tf.concat([tf.convert_to_tensor(tf.math.unsorted_segment_sum(o.values, o.indices, n))
                           for o in outs], 0)
        want = np.concatenate([[[float(k + j)] * 2 for k in range(n)] for j in range(5)])
        return 'grouped allreduce of 5 IndexedSlices', dense, want
    makers.append(sparse)

    random.Random(1000 + r).shuffle(makers)
    return [make() for make in makers]


def verify(results, values, where):
    check(len(values) == len(results), where + ': one value per op')
    for (what, _, want), got in zip(results, values):
        got = np.asarray(got, dtype=np.float64)
        check(got.shape == np.shape(want) and np.allclose(got, want),
              '{}: {} gave {} instead of {}'.format(where, what, got.tolist(),
                                                     np.asarray(want).tolist()))


def in_tf1_session():
    graph = tf.Graph()
    with graph.as_default():
        results = build_ops()
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=THREADS,
                                          intra_op_parallelism_threads=1,
                                          use_per_session_threads=True)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            for step in range(3):
                verify(results, sess.run([out for _, out, _ in results]),
                       'TF1 session, {} inter-op threads, step {}'.format(THREADS, step))


def in_tf_function():
    traced = []  # the ops' descriptions and expected values, filled when step() is traced

    @tf.function(autograph=False)
    def step():
        traced[:] = build_ops()
        return [out for _, out, _ in traced]

    for call in range(3):
        values = step()
        verify(traced, [v.numpy() for v in values],
               'tf.function, {} inter-op threads, call {}'.format(THREADS, call))


def max_fused_tensors(path):
    """The largest fused_tensors of any span in a (possibly unterminated) timeline file."""
    with open(path) as f:
        text = f.read().rstrip().rstrip(',')
    if not text.endswith(']'):
        text += ']'
    fused = [e['args']['fused_tensors'] for e in json.loads(text)
             if isinstance(e, dict) and isinstance(e.get('args'), dict)
             and isinstance(e['args'].get('fused_tensors'), int)]
    return max(fused or [0])


def main():
    hvd.init()
    check(hvd.size() == 2, 'run with 2 ranks')
    from horovod.tensorflow import _execute, _kernel_ops
    check(_execute.backend_name == 'kernels', 'the kernel library is in use')
    check(_kernel_ops.deferred_done or os.environ.get('HOROVOD_TF_SYNC_KERNELS') == '1',
          'the kernel library finishes ops after returning their thread (deferred done)')
    in_tf1_session()
    in_tf_function()
    # Some ops waited for the peer longer than a kernel runs the engine itself: those finished
    # after their kernel had returned its thread (what keeps the graph from starving).
    if _kernel_ops.deferred_done:
        check(_kernel_ops.deferred_ops() > 0, 'some ops finished after their kernel returned')
    timeline = os.environ.get('HOROVOD_TIMELINE')
    hvd.shutdown()  # closes the timeline
    if timeline and RANK == 0:
        fused = max_fused_tensors(timeline)
        check(fused > 1, 'independent ops were fused (largest fused_tensors: {})'.format(fused))
    print('independent ops passed on rank {} with {} inter-op threads'.format(RANK, THREADS),
          flush=True)


RANK = int(os.environ.get('HOROVOD_RANK', '0'))


if __name__ == '__main__':
    main()
