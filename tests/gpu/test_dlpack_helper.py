"""horovod.dlpack (collectives on any DLPack array) with NumPy and JAX CPU arrays, at any size:
run_suite.sh runs it under ``horovodrun -np 2``; the same calls take CuPy/JAX GPU arrays (their
device path is test_collectives.py's, through the same core entry points)."""

import numpy as np
import pytest

import horovod.dlpack as hvd


@pytest.fixture(scope='module', autouse=True)
def init():
    hvd.init()
    yield
    hvd.shutdown()


def test_allreduce_in_place_and_into_out():
    r, n = hvd.rank(), hvd.size()
    x = np.full(4, r + 1.0, np.float32)
    assert hvd.allreduce(x, op=hvd.Sum, name='dl.ar') is x
    np.testing.assert_array_equal(x, np.full(4, n * (n + 1) / 2))
    out = np.empty(4, np.float32)
    hvd.allreduce(np.ones(4, np.float32), op=hvd.Average, out=out, prescale_factor=2.0)
    np.testing.assert_array_equal(out, np.full(4, 2.0))


def test_allgather_alltoall_results_are_dlpack_arrays():
    r, n = hvd.rank(), hvd.size()
    got = np.from_dlpack(hvd.allgather(np.full((r + 1, 2), r, np.int32)))
    np.testing.assert_array_equal(got, np.concatenate([np.full((q + 1, 2), q, np.int32)
                                                       for q in range(n)]))
    rows = np.arange(2 * n, dtype=np.int64).reshape(n, 2) + 100 * r
    out, received = hvd.alltoall(rows)
    assert received == [1] * n
    np.testing.assert_array_equal(np.from_dlpack(out),
                                  np.stack([np.arange(2) + 2 * r + 100 * q for q in range(n)]))


def test_broadcast_and_reducescatter():
    r, n = hvd.rank(), hvd.size()
    x = np.full(3, float(r), np.float64)
    hvd.broadcast(x, root_rank=n - 1)
    np.testing.assert_array_equal(x, np.full(3, float(n - 1)))
    out = np.empty((1, 2), np.float32)
    hvd.reducescatter(np.ones((n, 2), np.float32), out, op=hvd.Sum)
    np.testing.assert_array_equal(out, np.full((1, 2), float(n)))


def test_jax_arrays_are_read_never_written():
    jnp = pytest.importorskip('jax.numpy')
    n = hvd.size()
    out = np.empty(3, np.float32)
    hvd.allreduce(jnp.ones(3, jnp.float32), op=hvd.Sum, out=out)
    np.testing.assert_array_equal(out, np.full(3, float(n)))
    with pytest.raises(ValueError, match='allreduce: JAX arrays are immutable'):
        hvd.allreduce(jnp.ones(3), op=hvd.Sum)
    gathered = jnp.from_dlpack(hvd.allgather(jnp.arange(2, dtype=jnp.float32)))
    assert gathered.shape == (2 * n,)
