#!/usr/bin/env python3
"""Synthetic training benchmark for TensorFlow 2 (Horovod's flags and output lines).

    horovodrun -np 2 python examples/tensorflow2/tensorflow2_synthetic_benchmark.py
    horovodrun -np 2 python examples/tensorflow2/tensorflow2_synthetic_benchmark.py \
        --model ResNet50 --image-size 224

Each step runs forward, backward (DistributedGradientTape, one grouped reduction) and an
optimizer update on random data. After --num-warmup-batches steps, --num-iters iterations of
--num-batches-per-iter steps are timed; the result is the mean +- 1.96 standard deviations of
the per-iteration rates. The default model ('small_cnn', 32x32 images) runs in about half a
minute on 2 CPUs; any ``tf.keras.applications`` model name works too (random weights).
"""

import argparse
import timeit

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser(description='TensorFlow Synthetic Benchmark',
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--fp16-allreduce', action='store_true', default=False,
                   help='use fp16 compression during allreduce')
    p.add_argument('--bf16-allreduce', action='store_true', default=False,
                   help='use bf16 compression during allreduce')
    p.add_argument('--model', type=str, default='small_cnn',
                   help="'small_cnn' or a tf.keras.applications model name (e.g. ResNet50)")
    p.add_argument('--image-size', type=int, default=32, help='height and width of the images')
    p.add_argument('--batch-size', type=int, default=32, help='input batch size')
    p.add_argument('--num-warmup-batches', type=int, default=10,
                   help='number of warm-up batches that don\'t count towards benchmark')
    p.add_argument('--num-batches-per-iter', type=int, default=10,
                   help='number of batches per benchmark iteration')
    p.add_argument('--num-iters', type=int, default=10, help='number of benchmark iterations')
    p.add_argument('--eager', action='store_true', default=False,
                   help='run the step eagerly instead of in a tf.function')
    p.add_argument('--no-cuda', action='store_true', default=False,
                   help='accepted for compatibility: this build reduces on the CPU')
    return p.parse_args()


def small_cnn(image_size, num_classes=1000):
    return tf.keras.Sequential([
        tf.keras.Input((image_size, image_size, 3)),
        tf.keras.layers.Conv2D(16, 3, padding='same', activation='relu'),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu'),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(64, 3, padding='same', activation='relu'),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(256, activation='relu'),
        tf.keras.layers.Dense(num_classes),
    ])


def build_model(args):
    if args.model == 'small_cnn':
        return small_cnn(args.image_size)
    application = getattr(tf.keras.applications, args.model, None)
    if application is None:
        raise SystemExit('unknown model {!r}: use small_cnn or a tf.keras.applications name'
                         .format(args.model))
    return application(weights=None, input_shape=(args.image_size, args.image_size, 3))


def log(text):
    if hvd.rank() == 0:
        print(text, flush=True)


def main():
    args = parse_args()
    hvd.init()
    if args.fp16_allreduce and args.bf16_allreduce:
        raise SystemExit('choose one of --fp16-allreduce and --bf16-allreduce')
    compression = (hvd.Compression.fp16 if args.fp16_allreduce else
                   hvd.Compression.bf16 if args.bf16_allreduce else hvd.Compression.none)

    model = build_model(args)
    opt = tf.keras.optimizers.SGD(0.01)
    opt.build(model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    target = tf.random.uniform([args.batch_size], minval=0, maxval=1000, dtype=tf.int64)

    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(opt.variables, root_rank=0)

    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    if not args.eager:
        step = tf.function(step)

    def run_batches(count):
        for _ in range(count):
            step()

    log('Model: %s' % args.model)
    log('Batch size: %d' % args.batch_size)
    log('Number of CPUs: %d' % hvd.size())
    log('Running warmup...')
    timeit.timeit(lambda: run_batches(args.num_warmup_batches), number=1)

    log('Running benchmark...')
    img_secs = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(lambda: run_batches(args.num_batches_per_iter), number=1)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log('Iter #%d: %.1f img/sec per CPU' % (i, img_sec))
        img_secs.append(img_sec)

    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log('Img/sec per CPU: %.1f +-%.1f' % (img_sec_mean, img_sec_conf))
    log('Total img/sec on %d CPU(s): %.1f +-%.1f' %
        (hvd.size(), hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))


if __name__ == '__main__':
    main()
