"""Run by test_tensorflow_tf1.py under ``horovodrun -np 2``: horovod.tensorflow in TF1 mode
(eager execution disabled for the whole process, sessions, MonitoredTrainingSession, hooks).
Exits non-zero on the first failed check."""

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

import horovod.tensorflow as hvd  # noqa: E402


def check(condition, what):
    if not condition:
        raise SystemExit('rank {}: check failed: {}'.format(hvd.rank(), what))


def train_with_hook_and_aggregation():
    r = hvd.rank()
    w = tf.compat.v1.get_variable('w', initializer=tf.constant([1.0 + r, 2.0 + r]))
    x = tf.constant([1.0, 2.0]) * (r + 1)
    loss = tf.reduce_sum(tf.square(x * w)) / 2.0
    global_step = tf.compat.v1.train.get_or_create_global_step()
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.1),
                                   backward_passes_per_step=2)
    train = opt.minimize(loss, global_step=global_step)
    values = []
    with tf.compat.v1.train.MonitoredTrainingSession(
            hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as sess:
        for _ in range(4):
            sess.run(train)
            values.append(sess.run(w))  # a separate run: ordered after the update
        check(sess.run(global_step) == 4, 'global_step counts every pass')
    # Runs 1 and 3 only aggregate; runs 2 and 4 apply. The hook made rank 0's start common.
    check(len(values) == 4, 'four runs')
    check(np.allclose(values[0], [1.0, 2.0]), 'first pass applies nothing: %s' % values[0])
    check(not np.allclose(values[1], [1.0, 2.0]), 'second pass applies')
    check(np.allclose(values[1], values[2]), 'third pass applies nothing')
    return values[-1]


def variables_objects_and_state():
    r = hvd.rank()
    with tf.compat.v1.Session() as sess:
        v = tf.compat.v1.get_variable('v', initializer=tf.constant([float(r)]))
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(hvd.broadcast_global_variables(hvd.size() - 1))
        check(sess.run(v).tolist() == [hvd.size() - 1.0], 'broadcast_global_variables')
        check(hvd.broadcast_object({'r': r}, root_rank=0, session=sess) == {'r': 0},
              'broadcast_object with a session')
        check(hvd.allgather_object(r, session=sess) == list(range(hvd.size())),
              'allgather_object with a session')
        sess.run(v.assign([float(r)]))
        state = hvd.elastic.TensorFlowState([v], session=sess, epoch=r)
        state.sync()
        check(sess.run(v).tolist() == [0.0] and state.epoch == 0, 'TensorFlowState.sync')
        sess.run(v.assign([5.0]))
        state.restore()
        check(sess.run(v).tolist() == [0.0], 'TensorFlowState.restore')
        return sess.run(v)


def main():
    hvd.init()
    with tf.Graph().as_default():
        final_w = train_with_hook_and_aggregation()
    with tf.Graph().as_default():
        variables_objects_and_state()
        with tf.compat.v1.Session() as sess:
            everyone = hvd.allgather_object(final_w.tolist(), session=sess)
    check(all(np.allclose(everyone[0], w) for w in everyone), 'identical weights %s' % everyone)
    if hvd.rank() == 0:
        print('tf1 checks passed on {} ranks'.format(hvd.size()), flush=True)


if __name__ == '__main__':
    main()
