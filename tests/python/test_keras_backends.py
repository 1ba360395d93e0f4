"""Keras flavours that need their own process (the Keras backend and tf-keras are chosen before
keras is imported), and the Keras examples: each runs under ``horovodrun -np 2`` with a timeout
and must exit 0 on every rank (the scripts check their results and exit non-zero otherwise).

* tf-keras 2 (``TF_USE_LEGACY_KERAS=1``) with horovod.tensorflow.keras:
  keras_scripts/tf_keras_legacy.py, the optimizer's Horovod API for custom loops
  (``_compute_gradients``, ``_allreduce``, ``_agg_helper.counter``):
  keras_scripts/tf_keras_optimizer_api.py, TF1 graph mode: keras_scripts/tf1_graph.py, and
  test_tensorflow.py's SyncBatchNormalization tests at 3 ranks
* Keras 3 on PyTorch and on JAX with horovod.keras: keras_scripts/keras3_backend.py
* examples/keras/keras_digits.py and keras_any_backend.py
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from launch_util import run_under_horovodrun

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, 'keras_scripts')
EXAMPLES = os.path.join(HERE, '..', '..', 'examples', 'keras')
TIMEOUT = int(os.environ.get('HOROVOD_KERAS_TEST_TIMEOUT', '240'))


def needs(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason='needs {}'.format(', '.join(missing)))


def horovodrun(args, env_overrides, cwd, np_=2):
    """Runs ``python args...`` on ``np_`` ranks; returns the combined output, failing the test
    (with the output's tail) on a non-zero exit or a timeout."""
    env = dict(env_overrides)
    env.setdefault('HOROVOD_GLOO_TIMEOUT_SECONDS',
                   os.environ.get('HOROVOD_GLOO_TIMEOUT_SECONDS', '60'))
    code, out = run_under_horovodrun(args, TIMEOUT, env, np_=np_, cwd=cwd)
    if code != 0:
        pytest.fail('exit code {}:\n{}'.format(code, out[-8000:]), pytrace=False)
    return out


@needs('tensorflow', 'tf_keras')
def test_tf_keras_legacy(tmp_path):
    out = horovodrun(['tf_keras_legacy.py', str(tmp_path)], {'TF_USE_LEGACY_KERAS': '1'},
                     SCRIPTS)
    assert out.count('tf-keras rank') == 2


@needs('tensorflow', 'tf_keras')
@pytest.mark.parametrize('np_', [2, 3], ids=lambda n: 'np%d' % n)
def test_tf_keras_optimizer_custom_loop_api(np_):
    out = horovodrun(['tf_keras_optimizer_api.py'], {'TF_USE_LEGACY_KERAS': '1'}, SCRIPTS,
                     np_=np_)
    assert out.count('tf-keras optimizer api rank') == np_


@needs('tensorflow', 'tf_keras')
def test_tf1_graph_broadcast_global_variables():
    out = horovodrun(['tf1_graph.py'], {'TF_USE_LEGACY_KERAS': '1'}, SCRIPTS)
    assert out.count('tf1 graph rank') == 2


@needs('tensorflow', 'tf_keras')
def test_tf_keras_sync_batch_norm():
    # tf-keras picks the fused kernel for 4-D input unless told not to (it never calls _moments).
    # 3 ranks: unequal batches and an empty one (test_distributed.py runs Keras 3 at 2 and 3).
    out = horovodrun(['-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-k', 'sync_batch_norm',
                      'test_tensorflow.py'], {'TF_USE_LEGACY_KERAS': '1'}, HERE, np_=3)
    assert len(re.findall(r'\b\d+ passed', out)) == 3 and ' failed' not in out


@pytest.mark.parametrize('backend', [
    pytest.param('torch', marks=needs('keras', 'torch')),
    pytest.param('jax', marks=needs('keras', 'jax'))])
def test_keras3_backend(backend, tmp_path):
    out = horovodrun(['keras3_backend.py', str(tmp_path)], {'KERAS_BACKEND': backend}, SCRIPTS)
    assert out.count('{} rank'.format(backend)) == 2
    # The model saved with the distributed optimizer loads with Keras alone.
    path = str(tmp_path / 'model_{}_0.keras'.format(backend))
    check = ('import sys, keras; m = keras.models.load_model({!r}); '
             'assert "horovod" not in sys.modules; print(type(m.optimizer).__name__)').format(path)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    done = subprocess.run([sys.executable, '-c', check], env=dict(env, KERAS_BACKEND=backend),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith('Adam')


def final_accuracy(out):
    found = re.findall(r'Final test accuracy: ([0-9.]+)%', out)
    assert found, out[-4000:]
    return float(found[-1])


@needs('tensorflow', 'keras', 'sklearn')
def test_example_keras_digits():
    out = horovodrun([os.path.join(EXAMPLES, 'keras_digits.py'), '--epochs', '6'], {}, HERE)
    assert 'finished gradual learning rate warmup' in out
    assert out.count('val_accuracy') >= 6
    assert final_accuracy(out) >= 88.0


@needs('keras', 'torch', 'sklearn')
def test_example_keras_any_backend_on_torch():
    out = horovodrun([os.path.join(EXAMPLES, 'keras_any_backend.py'), '--epochs', '5'],
                     {'KERAS_BACKEND': 'torch'}, HERE)
    assert 'on torch, 2 workers' in out and out.count('test accuracy') >= 5
    assert final_accuracy(out) >= 88.0
