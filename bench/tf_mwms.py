#!/usr/bin/env python3
"""Scaling of the TensorFlow synthetic benchmark's model at 2 ranks: Horovod
(``examples/tensorflow2/tensorflow2_synthetic_benchmark.py`` under horovodrun) beside
TensorFlow's own ``tf.distribute.MultiWorkerMirroredStrategy`` (two worker processes on this
host, ``TF_CONFIG`` on localhost ports), same model, batch and thread count.

    python3 bench/tf_mwms.py --reps 3        # prints a markdown table

MultiWorkerMirroredStrategy is run with a custom training loop whose gradients are summed by the
strategy's replica context (``all_reduce``) and applied by assigning to the variables: Keras 3
optimizers do not run under it (that is one reason people pick Horovod), so the loop avoids them
on both sides' behalf. Img/sec is per process; scaling = 2-rank total / 1-rank rate.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, '..', 'examples', 'tensorflow2', 'tensorflow2_synthetic_benchmark.py')
BATCH, WARMUP, STEPS = 32, 5, 30
# The same threads for every process of both systems (TensorFlow reads these at start-up).
THREADS = {'TF_NUM_INTRAOP_THREADS': '1', 'TF_NUM_INTEROP_THREADS': '2', 'TF_CPP_MIN_LOG_LEVEL': '3'}


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def mwms_worker():
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input((32, 32, 3)),
            tf.keras.layers.Conv2D(16, 3, padding='same', activation='relu'),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu'),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, padding='same', activation='relu'),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(256, activation='relu'),
            tf.keras.layers.Dense(1000),
        ])
    data = tf.random.uniform([BATCH, 32, 32, 3])
    target = tf.random.uniform([BATCH], maxval=1000, dtype=tf.int64)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        def replica_step():
            with tf.GradientTape() as tape:
                loss = loss_fn(target, model(data, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            ctx = tf.distribute.get_replica_context()
            grads = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
            for v, g in zip(model.trainable_variables, grads):
                v.assign_sub(0.01 * g)
            return loss
        return strategy.run(replica_step)

    for _ in range(WARMUP):
        step()
    t = time.perf_counter()
    for _ in range(STEPS):
        step()
    rate = BATCH * STEPS / (time.perf_counter() - t)
    print('RESULT ' + json.dumps({'img_sec': rate}), flush=True)


def run_mwms(n):
    ports = [_free_port() for _ in range(n)]
    cluster = {'worker': ['127.0.0.1:%d' % p for p in ports]}
    procs = []
    for i in range(n):
        env = dict(os.environ, **THREADS,
                   TF_CONFIG=json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': i}}))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), '--mwms-worker'],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    rates = [json.loads(line.split('RESULT ', 1)[1])['img_sec']
             for out in outs for line in out.splitlines() if 'RESULT ' in line]
    if len(rates) != n:
        raise RuntimeError('MultiWorkerMirroredStrategy did not run:\n' + outs[0][-3000:])
    return statistics.mean(rates)


def run_horovod(n):
    env = dict(os.environ, **THREADS)
    cmd = ['horovodrun', '-np', str(n), sys.executable, EXAMPLE, '--batch-size', str(BATCH),
           '--num-warmup-batches', str(WARMUP), '--num-batches-per-iter', '10', '--num-iters', '3']
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900).stdout
    for line in out.splitlines():
        if 'Img/sec per CPU:' in line:
            return float(line.split('Img/sec per CPU:', 1)[1].split()[0])
    raise RuntimeError('horovod benchmark printed no rate:\n' + out[-3000:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--mwms-worker', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mwms_worker:
        mwms_worker()
        return
    rows = {k: [] for k in ('horovod-1', 'horovod-2', 'mwms-1', 'mwms-2')}
    for _ in range(args.reps):
        for n in (1, 2):
            rows['horovod-%d' % n].append(run_horovod(n))
            rows['mwms-%d' % n].append(run_mwms(n))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print('| system | 1 rank img/s | 2 ranks img/s per rank | scaling (2-rank total / 1 rank) |')
    print('|---|---|---|---|')
    for name, key in (('Horovod', 'horovod'), ('MultiWorkerMirroredStrategy', 'mwms')):
        one, two = med[key + '-1'], med[key + '-2']
        print('| {} | {:.1f} | {:.1f} | {:.2f} |'.format(name, one, two, 2 * two / one))


if __name__ == '__main__':
    main()
