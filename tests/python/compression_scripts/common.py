"""What the torch and TensorFlow compression workers share: the compressors under test, the
accuracy bar each must clear, and the ``OK <check>`` lines test_compression.py counts."""

import sys

TARGET_ACCURACY = 0.85
MAX_LOSS = 0.05  # accuracy points below the uncompressed run's that a compressor may lose


def ok(name):
    sys.stdout.write('OK %s\n' % name)
    sys.stdout.flush()


def compressors(hvd):
    """(name, compression) pairs, the uncompressed reference first."""
    return [('none', hvd.Compression.none), ('powersgd1', hvd.PowerSGD(rank=1)),
            ('powersgd2', hvd.PowerSGD(rank=2, start_iter=5)), ('int8', hvd.Int8Quantizer())]


def check_training(hvd, train, prefix):
    """Trains with each compressor (``train(compression)`` returns (model, opt, accuracy)) and
    checks the accuracy against the target and against the uncompressed run."""
    reference = None
    for name, compression in compressors(hvd):
        _, _, accuracy = train(compression)
        sys.stdout.write('accuracy %s %.4f\n' % (name, accuracy))
        assert accuracy >= TARGET_ACCURACY, '%s: accuracy %.3f < %.2f' % (name, accuracy, TARGET_ACCURACY)
        if reference is None:
            reference = accuracy
        assert accuracy >= reference - MAX_LOSS, '%s: accuracy %.3f, uncompressed %.3f' % (
            name, accuracy, reference)
        ok(prefix + name)
