"""HOROVOD_JAX_JIT_PATH: how horovod.jax's collectives run inside jax.jit (one rank per fresh
process, since the path is chosen once per process).

The path a jitted collective took is read from the compiled program: an XLA FFI custom call to
``horovod_jax_allreduce``, or JAX's host callback.
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip('jax')

SCRIPT = r'''
import os, sys, warnings
os.environ['JAX_PLATFORMS'] = 'cpu'
import jax, jax.numpy as jnp
import horovod.jax as hvd
from horovod.jax import _xla
if sys.argv[1] == 'missing-library':
    _xla._LIBRARY = '/nonexistent/_horovod_jax_ffi.so'
hvd.init()
f = jax.jit(lambda x: hvd.allreduce(x, op=hvd.Sum, name='path'))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    try:
        text = f.lower(jnp.ones(3)).as_text()
    except Exception as e:
        print('ERROR', type(e).__name__, e)
        sys.exit(0)
assert float(f(jnp.ones(3))[0]) == 1.0
print('PATH', _xla.path())
print('FFI_CALL', 'horovod_jax_allreduce' in text)
for w in caught:
    print('WARNING', w.message)
hvd.shutdown()
'''


def run(env_value, variant='plain'):
    env = dict(os.environ)
    env.pop('HOROVOD_JAX_JIT_PATH', None)
    for key in ('HOROVOD_RANK', 'HOROVOD_SIZE'):
        env.pop(key, None)
    if env_value is not None:
        env['HOROVOD_JAX_JIT_PATH'] = env_value
    done = subprocess.run([sys.executable, '-c', SCRIPT, variant], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_default_is_ffi():
    out = run(None)
    assert 'PATH ffi' in out and 'FFI_CALL True' in out
    assert 'WARNING' not in out


@pytest.mark.parametrize('value', ['ffi', 'FFI'])
def test_ffi_when_asked(value):
    out = run(value)
    assert 'PATH ffi' in out and 'FFI_CALL True' in out


def test_callback_when_asked():
    out = run('callback')
    assert 'PATH callback' in out and 'FFI_CALL False' in out
    assert 'WARNING' not in out


def test_bad_value_is_refused():
    out = run('fast')
    assert "ERROR ValueError HOROVOD_JAX_JIT_PATH='fast': expected one of ffi, callback" in out


def test_unusable_handlers_fall_back_with_one_warning():
    out = run(None, 'missing-library')
    assert 'PATH callback' in out and 'FFI_CALL False' in out
    warnings = [line for line in out.splitlines() if line.startswith('WARNING')]
    assert len(warnings) == 1, out
    assert 'use io_callback' in warnings[0] and '/nonexistent/_horovod_jax_ffi.so is missing' in warnings[0]


def test_unusable_handlers_fail_when_ffi_is_asked():
    out = run('ffi', 'missing-library')
    assert 'ERROR FfiUnavailable HOROVOD_JAX_JIT_PATH=ffi, but the XLA FFI handlers cannot be used' in out
    assert '/nonexistent/_horovod_jax_ffi.so is missing' in out
