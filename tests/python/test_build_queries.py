"""Horovod's build-query helpers and other module-level names that scripts import directly:
horovod.common.util (env, check_extension, extension_available, gpu_available, *_built,
is_version_greater_equal_than, get_ext_suffix), horovod.torch.check_extension, and
horovod.torch.mpi_ops (the autograd Functions, Compression, gpu_available,
check_installed_version). Single process; the differentiable collectives run as a one-rank job."""

import os
import subprocess
import sys
import sysconfig
import warnings

import pytest

from horovod.common import exceptions
from horovod.common import util

torch = pytest.importorskip('torch')
import horovod.torch as hvd  # noqa: E402
from horovod.torch import collectives, mpi_ops  # noqa: E402

QUERIES = (util.gpu_available, util.mpi_built, util.gloo_built, util.nccl_built, util.ddl_built,
           util.ccl_built)


@pytest.fixture
def fresh_caches():
    for query in QUERIES:
        query.cache_clear()
    yield
    for query in QUERIES:
        query.cache_clear()


# ---- horovod.common.util.env ----------------------------------------------------------------------

def test_env_sets_and_restores(monkeypatch):
    monkeypatch.setenv('HVD_TEST_OLD', 'before')
    monkeypatch.delenv('HVD_TEST_NEW', raising=False)
    monkeypatch.delenv('HVD_TEST_NONE', raising=False)
    with util.env(HVD_TEST_OLD='during', HVD_TEST_NEW='new', HVD_TEST_NONE=None):
        assert os.environ['HVD_TEST_OLD'] == 'during'
        assert os.environ['HVD_TEST_NEW'] == 'new'
        assert 'HVD_TEST_NONE' not in os.environ  # None values are ignored
    assert os.environ['HVD_TEST_OLD'] == 'before'
    assert 'HVD_TEST_NEW' not in os.environ
    with pytest.raises(KeyError):
        with util.env(HVD_TEST_OLD='during'):
            raise KeyError('inside')
    assert os.environ['HVD_TEST_OLD'] == 'before'


# ---- extension checks -----------------------------------------------------------------------------

MISSING = ('Extension horovod.torch has not been built.  If this is not expected, reinstall Horovod '
           'with HOROVOD_WITH_PYTORCH=1 to debug the build error.')


def test_check_extension(monkeypatch, tmp_path):
    assert hvd.check_extension is util.check_extension
    # Horovod's own call: its per-framework library does not exist, horovod._core serves instead.
    assert hvd.check_extension('horovod.torch', 'HOROVOD_WITH_PYTORCH', hvd.__file__, 'mpi_lib_v2') is None
    monkeypatch.setattr(util, '_core_found', lambda: False)
    with pytest.raises(ImportError) as e:
        hvd.check_extension('horovod.torch', 'HOROVOD_WITH_PYTORCH', hvd.__file__, 'mpi_lib_v2')
    assert str(e.value) == MISSING
    # A library at the path Horovod computes counts.
    (tmp_path / 'sub').mkdir()
    (tmp_path / 'sub' / ('lib' + util.get_ext_suffix())).write_bytes(b'')
    util.check_extension('x', 'HOROVOD_WITH_X', str(tmp_path / '__init__.py'), 'sub', 'lib')


def test_get_ext_suffix():
    assert util.get_ext_suffix() == sysconfig.get_config_var('EXT_SUFFIX')
    from horovod import _core
    assert _core.__file__.endswith(util.get_ext_suffix())
    assert util.get_extension_full_path('/a/b/__init__.py', 'c', 'd') == '/a/b/c/d' + util.get_ext_suffix()


def test_extension_available(capfd):
    assert util.extension_available('torch') is True
    assert util.extension_available('mxnet') is False
    assert util.extension_available('no_such_framework') is False
    assert util.extension_available('torch', verbose=True) is True
    out = capfd.readouterr().out
    assert 'Checking whether extension torch was built.\n' in out
    assert 'Extension torch was built.\n' in out


def test_extension_unavailable_without_core(monkeypatch):
    monkeypatch.setattr(util, '_core_found', lambda: False)
    assert util.extension_available('torch') is False


def test_gpu_available(fresh_caches, capfd):
    assert mpi_ops.gpu_available is util.gpu_available
    from horovod import _core
    built = bool(_core.cuda_built())  # the CUDA backend, when nvcc was found at build time
    assert util.gpu_available('torch') is built
    assert util.gpu_available('torch', verbose=True) is built
    assert 'Extension torch {}running with GPU.'.format('was ' if built else 'was NOT ') in capfd.readouterr().out


# ---- *_built ----------------------------------------------------------------------------------------

def test_built_queries_match_the_core(fresh_caches, capfd):
    from horovod import _core
    built = bool(_core.mpi_built())  # MPI plugins found next to the core (docs/mpi.md)
    assert util.mpi_built() is built and util.mpi_built() == hvd.mpi_built()
    assert util.gloo_built() is True and util.gloo_built() == hvd.gloo_built()
    assert util.nccl_built() == _core.nccl_built() and type(util.nccl_built()) is int
    assert util.ddl_built() is False
    assert util.ccl_built() is False
    assert util.mpi_built(verbose=True) is built
    assert ('Extension horovod._core was {}built with MPI.'.format('' if built else 'NOT ')
            in capfd.readouterr().out)


def test_built_queries_without_core(fresh_caches, monkeypatch):
    monkeypatch.setattr(util, '_load_core', lambda verbose=False: None)
    assert util.mpi_built() is False
    for query, message in ((util.gloo_built, 'Failed to determine if Horovod was built with Gloo support.'),
                           (util.nccl_built, 'Failed to determine NCCL support from extension.'),
                           (util.ddl_built, 'Failed to determine if DDL support from extension.'),
                           (util.ccl_built, 'Failed to determine if CCL support from extension.')):
        with pytest.raises(RuntimeError) as e:
            query()
        assert str(e.value) == message


def test_is_version_greater_equal_than():
    assert util.is_version_greater_equal_than('2.1.0', '2.0.0')
    assert util.is_version_greater_equal_than('2.0.0', '2.0.0')
    assert not util.is_version_greater_equal_than('1.13.1+cpu', '2.0.0')
    with pytest.raises(ValueError, match='only accepts string arguments'):
        util.is_version_greater_equal_than(2, '2.0.0')
    with pytest.raises(ValueError, match='major.minor.patch'):
        util.is_version_greater_equal_than('2.0.0', '2.0')


# ---- horovod.torch.mpi_ops --------------------------------------------------------------------------

FUNCTIONS = ('HorovodAllreduce', 'HorovodGroupedAllreduce', 'HorovodAllgather', 'HorovodGroupedAllgather',
             'HorovodBroadcast', 'HorovodAlltoall', 'HorovodReducescatter', 'HorovodGroupedReducescatter')


def test_mpi_ops_names():
    for name in FUNCTIONS:
        cls = getattr(mpi_ops, name)
        assert issubclass(cls, torch.autograd.Function), name
        assert cls is getattr(collectives, name)
    assert mpi_ops.Compression is hvd.Compression
    assert mpi_ops.Compression.fp16.compress(torch.ones(2))[0].dtype == torch.float16


def test_check_installed_version():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert mpi_ops.check_installed_version('pytorch', torch.__version__) is None
    # Only a recorded build version can mismatch (the core records none).
    with pytest.warns(UserWarning, match='Framework pytorch installed with version 1.0.0'):
        util.check_installed_version('pytorch', '2.0.0', built_version='1.0.0')
    cause = OSError('undefined symbol')
    with pytest.raises(exceptions.HorovodVersionMismatchError) as e:
        util.check_installed_version('pytorch', '2.0.0', cause, built_version='1.0.0')
    assert e.value.__cause__ is cause


# In a child process: this process must stay uninitialized for the other single-process tests
# (after a shutdown, collectives report "shut down" instead of "not initialized").
_GRAD_FN_SCRIPT = '''
import torch, horovod.torch as hvd
hvd.init()
x = torch.ones(4, 2, requires_grad=True)
cases = {
    'HorovodAllreduce': lambda: hvd.allreduce(x, op=hvd.Sum),
    'HorovodGroupedAllreduce': lambda: hvd.grouped_allreduce([x, x], op=hvd.Sum)[0],
    'HorovodAllgather': lambda: hvd.allgather(x),
    'HorovodGroupedAllgather': lambda: hvd.grouped_allgather([x])[0],
    'HorovodBroadcast': lambda: hvd.broadcast(x, root_rank=0),
    'HorovodAlltoall': lambda: hvd.alltoall(x),
    'HorovodReducescatter': lambda: hvd.reducescatter(x, op=hvd.Sum),
    'HorovodGroupedReducescatter': lambda: hvd.grouped_reducescatter([x], op=hvd.Sum)[0],
}
for name, call in cases.items():
    x.grad = None
    out = call()
    out.sum().backward()
    print(name, type(out.grad_fn).__name__, tuple(x.grad.shape))
hvd.shutdown()
'''


def test_differentiable_collectives_use_the_functions():
    # Each differentiable collective records its autograd Function as the output's grad_fn
    # (a one-rank job), and backward runs through it.
    out = subprocess.run([sys.executable, '-c', _GRAD_FN_SCRIPT], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['{0} {0}Backward (4, 2)'.format(name) for name in FUNCTIONS]
