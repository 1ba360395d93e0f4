#!/usr/bin/env python3
"""Builds libhvd_cuda_standin.so, the host-memory CUDA runtime + NCCL stand-in, for Python tests.

    python3 tests/gpu/standin/build_standin.py     builds if needed, prints the library's path

From Python (tests/gpu/ conftest): load this file with importlib and call library_path(); point
the backend at the result with HOROVOD_CUDA_LIBRARY=<path> and HOROVOD_NCCL_LIBRARY=<path>.

The library is built (without its GoogleTest suite) into a cache directory keyed by a hash of
the stand-in's sources and of cpp/backends/cuda/cuda_api.h, so an edit rebuilds it and parallel
test processes share one build (serialized by a file lock). HVD_STANDIN_BUILD_DIR overrides the
cache directory (default: $XDG_CACHE_HOME or ~/.cache, then horovod/cuda-standin/<hash>).
The CMake test build also produces it, at <build>/tests/gpu/standin/libhvd_cuda_standin.so.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..', '..'))
LIBRARY = 'libhvd_cuda_standin.so'


def _sources_hash():
    digest = hashlib.sha256()
    files = [os.path.join(REPO, 'cpp', 'backends', 'cuda', 'cuda_api.h')]
    for name in sorted(os.listdir(HERE)):
        if name.endswith(('.cc', '.h', '.txt', '.cmake')):
            files.append(os.path.join(HERE, name))
    for path in files:
        digest.update(os.path.basename(path).encode())
        with open(path, 'rb') as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def _build_dir():
    explicit = os.environ.get('HVD_STANDIN_BUILD_DIR')
    if explicit:
        return explicit
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(cache, 'horovod', 'cuda-standin', _sources_hash())


def library_path():
    """The stand-in library's path, built first when missing. Raises RuntimeError (with the
    build's output) when it cannot be built, e.g. without the CUDA headers or nccl.h."""
    build = _build_dir()
    os.makedirs(build, exist_ok=True)
    path = os.path.join(build, LIBRARY)
    with open(os.path.join(build, '.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path) and not os.environ.get('HVD_STANDIN_BUILD_DIR'):
            return path
        configure = ['cmake', '-S', HERE, '-B', build, '-DHVD_STANDIN_BUILD_TESTS=OFF',
                     '-DCMAKE_BUILD_TYPE=RelWithDebInfo']
        if shutil.which('ninja') and not os.path.exists(os.path.join(build, 'Makefile')):
            configure += ['-G', 'Ninja']
        if shutil.which('ccache'):
            configure += ['-DCMAKE_CXX_COMPILER_LAUNCHER=ccache']
        for command in (configure, ['cmake', '--build', build, '-j', '2']):
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if result.returncode != 0:
                raise RuntimeError('building the CUDA stand-in failed: %s\n%s' % (' '.join(command), result.stdout))
    if not os.path.exists(path):
        raise RuntimeError('building the CUDA stand-in produced no %s in %s' % (LIBRARY, build))
    return path


if __name__ == '__main__':
    try:
        print(library_path())
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
