"""Error-feedback compressors (PowerSGD, Int8Quantizer): their math in one process (the
collectives replaced by the identity of a one-rank job), then torch and TensorFlow training at 2
ranks under horovodrun (compression_scripts/*_worker.py), each run bounded by a timeout."""

import os
import re

import numpy as np
import pytest
from launch_util import run_under_horovodrun

from horovod.common.error_feedback import Comm

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '420'))

torch = pytest.importorskip('torch')
try:
    from horovod import _core
except ImportError:
    _core = None


def _identity_comm(clone):
    return Comm(lambda tensors, op, tag: [clone(t) for t in tensors], 1)


def _torch_compressors():
    from horovod.torch.compression import Int8Quantizer, PowerSGD
    return PowerSGD, Int8Quantizer


@pytest.mark.parametrize('r', [1, 2, 3])
def test_powersgd_reconstructs_a_rank_r_matrix_exactly(r):
    PowerSGD, _ = _torch_compressors()
    g = torch.Generator().manual_seed(r)
    m = (torch.randn(48, r, generator=g, dtype=torch.float64) @
         torch.randn(r, 30, generator=g, dtype=torch.float64))
    c = PowerSGD(rank=r)
    out, = c.reduce([m.reshape(48, 5, 6)], ['w'], _identity_comm(torch.clone))
    assert out.shape == (48, 5, 6)
    assert torch.allclose(out.reshape(48, 30), m, atol=1e-10)
    assert c._slots['w']['residual'].abs().max() < 1e-10
    # A rank-(r+1) matrix is not reconstructed by rank r: the residual keeps the rest.
    m2 = m + torch.outer(torch.randn(48, generator=g, dtype=torch.float64),
                         torch.randn(30, generator=g, dtype=torch.float64))
    out2, = PowerSGD(rank=r).reduce([m2], ['w'], _identity_comm(torch.clone))
    assert (out2 - m2).abs().max() > 1e-3


def test_powersgd_sends_small_and_1d_tensors_exactly():
    PowerSGD, _ = _torch_compressors()
    c = PowerSGD(rank=4)
    bias, small = torch.randn(100), torch.randn(6, 5)  # 6x5 < (6+5)*4*2: not worth it
    out = c.reduce([bias, small], ['b', 's'], _identity_comm(torch.clone))
    assert torch.equal(out[0], bias) and torch.equal(out[1], small)
    assert 'b' not in c._slots and 's' not in c._slots


@pytest.mark.parametrize('which', ['powersgd', 'int8'])
def test_error_feedback_sent_signal_tracks_the_accumulated_gradient(which):
    """sum(sent) + residual == sum(gradients) at every step, and the residual stays bounded,
    so the relative gap between the accumulated sent signal and the accumulated gradient
    shrinks as steps accumulate."""
    PowerSGD, Int8Quantizer = _torch_compressors()
    c = PowerSGD(rank=1) if which == 'powersgd' else Int8Quantizer()
    g = torch.Generator().manual_seed(3)
    drift = torch.randn(40, 24, generator=g, dtype=torch.float64)
    total_g = torch.zeros(40, 24, dtype=torch.float64)
    total_s = torch.zeros_like(total_g)
    gaps = {}
    for step in range(1, 401):
        grad = drift + torch.randn(40, 24, generator=g, dtype=torch.float64)
        sent, = c.reduce([grad], ['w'], _identity_comm(torch.clone))
        total_g += grad
        total_s += sent
        residual = c._slots['w']['residual'].reshape(40, 24)
        assert torch.allclose(total_s + residual, total_g, atol=1e-8)
        if step in (20, 400):
            gaps[step] = float((total_g - total_s).norm() / total_g.norm())
    assert gaps[400] < gaps[20] / 5, gaps
    assert gaps[400] < 0.05, gaps


def test_int8_levels_keep_the_sum_in_int8():
    _, Int8Quantizer = _torch_compressors()
    assert Int8Quantizer.levels(2) == 63 and Int8Quantizer.levels(127) == 1
    with pytest.raises(ValueError, match='at most 127 ranks'):
        Int8Quantizer.levels(128)


def test_invalid_arguments():
    PowerSGD, _ = _torch_compressors()
    for kwargs in (dict(rank=0), dict(rank=1.5), dict(start_iter=-1),
                   dict(min_compression_rate=0.5)):
        with pytest.raises(ValueError, match='PowerSGD'):
            PowerSGD(**kwargs)


def test_tensorflow_math_matches_torch():
    tf = pytest.importorskip('tensorflow')
    from horovod.tensorflow.compression import Int8Quantizer, PowerSGD
    g = np.random.default_rng(0)
    m = (g.standard_normal((32, 2)) @ g.standard_normal((2, 20))).astype(np.float32)
    out, = PowerSGD(rank=2).reduce([tf.constant(m)], ['w'], _identity_comm(tf.identity))
    np.testing.assert_allclose(out.numpy(), m, atol=1e-4)
    c = Int8Quantizer()
    total = np.zeros((32, 20), np.float32)
    for _ in range(50):
        sent, = c.reduce([tf.constant(m)], ['w'], _identity_comm(tf.identity))
        total += sent.numpy()
    np.testing.assert_allclose(total + c._slots['w']['residual'].numpy(), 50 * m, atol=1e-3)


def _expect(out, code, names, np_=2):
    assert code == 0, out[-8000:]
    assert len(re.findall(r'\bDONE\b', out)) == np_, out[-8000:]
    oks = re.findall(r'\bOK (\w+)', out)
    for name in names:
        assert oks.count(name) == np_, '%s passed on %d of %d ranks\n%s' % (
            name, oks.count(name), np_, out[-8000:])


@pytest.mark.skipif(_core is None, reason='needs the core extension')
def test_torch_training_at_two_ranks():
    code, out = run_under_horovodrun(
        [os.path.join(HERE, 'compression_scripts', 'torch_worker.py')], TIMEOUT)
    _expect(out, code, ['torch_train_none', 'torch_train_powersgd1', 'torch_train_powersgd2',
                        'torch_train_int8', 'torch_state_dict',
                        'torch_state_dict_fresh_optimizer', 'torch_elastic_restore',
                        'torch_elastic_sync', 'torch_refusals'])


@pytest.mark.skipif(_core is None, reason='needs the core extension')
def test_tensorflow_training_at_two_ranks():
    pytest.importorskip('tensorflow')
    code, out = run_under_horovodrun(
        [os.path.join(HERE, 'compression_scripts', 'tf_worker.py')], TIMEOUT)
    _expect(out, code, ['tf_tape_none', 'tf_tape_powersgd1', 'tf_tape_powersgd2', 'tf_tape_int8',
                        'tf_legacy_optimizer', 'tf_elastic_restore', 'tf_elastic_sync',
                        'tf_refusals'])
