"""What the installation says about CUDA and NCCL (docs/gpu.md, "Install / build") against what it
has: hvd.cuda_built() / nccl_built() / _core.cuda_libraries() and horovodrun --check-build, in
child processes where a query loads libraries (the loader runs once per process)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from horovod import _core
from horovod.common import util

CORE_DIR = os.path.dirname(_core.__file__)
KERNELS = os.path.join(CORE_DIR, 'libhorovod_cuda_kernels.so')
# Horovod's own NCCL ABI declaration, used by builds that found no nccl.h.
DECLARED_NCCL = 21304


def _libraries(**env):
    """_core.cuda_libraries() in a fresh process with `env` added."""
    code = 'import json; from horovod import _core; print(json.dumps(_core.cuda_libraries()))'
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **env), cwd='/')
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _wheel_nccl_code():
    """NCCL_VERSION_CODE of the installed nvidia-nccl wheel's nccl.h, or None."""
    try:
        import nvidia.nccl
    except ImportError:
        return None
    header = os.path.join(list(nvidia.nccl.__path__)[0], 'include', 'nccl.h')
    if not os.path.exists(header):
        return None
    with open(header) as f:
        match = re.search(r'#define NCCL_VERSION_CODE (\d+)', f.read())
    return int(match.group(1)) if match else None


def test_built_flags_match_the_installation():
    built = bool(_core.cuda_built())
    # The kernel library is installed exactly when the backend is built.
    assert os.path.exists(KERNELS) == built
    assert util.nccl_built() == _core.nccl_built()
    if built:
        assert _core.nccl_built() in (DECLARED_NCCL, _wheel_nccl_code())
    else:
        assert _core.nccl_built() == 0


def test_cuda_libraries_report():
    libs = _libraries()
    if not _core.cuda_built():
        assert libs == {}
        return
    for key in ('runtime', 'nccl', 'kernels', 'error', 'nccl_error'):
        assert key in libs, libs
    if libs['error']:
        # No usable CUDA runtime here: the reason names what was looked for.
        assert 'CUDA runtime' in libs['error'] or 'kernel' in libs['error'], libs
        return
    assert libs['kernels'] == KERNELS, libs
    assert int(libs['runtime_version']) >= 12000, libs
    assert 'device_count' in libs, libs
    if _wheel_nccl_code() is not None:
        # The nvidia-nccl wheel of one of this interpreter's site-packages folders.
        assert libs['nccl_error'] == '', libs
        assert libs['nccl'].endswith('nvidia/nccl/lib/libnccl.so.2'), libs
        assert int(libs['nccl_version']) == _wheel_nccl_code(), libs


def test_cuda_library_override_wins_and_fails_loudly():
    if not _core.cuda_built():
        return
    libs = _libraries(HOROVOD_CUDA_LIBRARY='/nonexistent/libcudart.so.13',
                      HOROVOD_NCCL_LIBRARY='/nonexistent/libnccl.so.2')
    assert libs['error'].startswith('HOROVOD_CUDA_LIBRARY=/nonexistent/libcudart.so.13: '), libs
    assert libs['runtime'] == ''


def test_check_build_reports_nccl_as_built():
    horovodrun = shutil.which('horovodrun')
    if horovodrun is None:
        pytest.skip('horovodrun is not on PATH')
    r = subprocess.run([horovodrun, '--check-build'], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    ops = r.stdout.split('Available Tensor Operations:\n')[1]
    assert ('    [X] NCCL' in ops) == (_core.nccl_built() > 0), r.stdout
    note = 'CUDA is built into this Horovod, NCCL '
    assert (note in r.stdout) == bool(_core.cuda_built()), r.stdout
    if _core.cuda_built():
        assert '(horovod.nccl_built() = {})'.format(_core.nccl_built()) in r.stdout, r.stdout
        assert '\n  CUDA runtime: ' in r.stdout and '\n  NCCL: ' in r.stdout, r.stdout
