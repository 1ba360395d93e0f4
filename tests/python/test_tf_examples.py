"""The TensorFlow 2 examples run under ``horovodrun -np 2`` (each bounded by a timeout) and
print what their docstrings promise: per-epoch progress, the stated accuracy and identical
weights for the digits example; Horovod's result lines for the synthetic benchmark."""

import os
import re

import pytest
from launch_util import run_under_horovodrun

pytest.importorskip('tensorflow')
pytest.importorskip('sklearn')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, 'examples', 'tensorflow2')
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))


def run_example(script, *args):
    rc, out = run_under_horovodrun([os.path.join(EXAMPLES, script)] + list(args), TIMEOUT)
    assert rc == 0, out[-6000:]
    return out


def test_digits_custom_training_loop():
    out = run_example('tensorflow2_digits.py')
    epochs = re.findall(r'epoch +(\d+): loss ([\d.]+) +test accuracy ([\d.]+)', out)
    assert len(epochs) == 15, out[-4000:]
    assert float(epochs[-1][1]) < float(epochs[0][1])
    assert 'weights identical on all 2 ranks: True' in out
    final = float(re.search(r'final test accuracy: ([\d.]+)', out).group(1))
    assert final >= 0.95


def test_synthetic_benchmark_output():
    out = run_example('tensorflow2_synthetic_benchmark.py', '--num-warmup-batches', '2',
                      '--num-batches-per-iter', '3', '--num-iters', '3', '--fp16-allreduce')
    assert 'Model: small_cnn' in out and 'Number of CPUs: 2' in out
    assert len(re.findall(r'Iter #\d+: [\d.]+ img/sec per CPU', out)) == 3
    per_cpu = re.search(r'Img/sec per CPU: ([\d.]+) \+-([\d.]+)', out)
    total = re.search(r'Total img/sec on 2 CPU\(s\): ([\d.]+) \+-([\d.]+)', out)
    assert per_cpu and total, out[-4000:]
    assert float(total.group(1)) == pytest.approx(2 * float(per_cpu.group(1)), rel=0.01)
