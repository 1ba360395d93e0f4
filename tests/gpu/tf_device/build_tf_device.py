#!/usr/bin/env python3
"""Builds libhvd_tf_standin_gpu.so, the TensorFlow "GPU" device over the CUDA stand-in (README.md).

    python3 tests/gpu/tf_device/build_tf_device.py     builds if needed, prints the plugin's path

From Python: load this file with importlib and call library_path() (tests/gpu/tf_standin_gpu.py
does, and loads the plugin into TensorFlow).

It compiles against the installed TensorFlow's headers and links its libtensorflow_framework, so
the build goes into a cache directory keyed by a hash of the plugin's sources (and the project
headers it includes) and of that TensorFlow (version and library), shared by parallel test processes (a file lock serializes them):
$XDG_CACHE_HOME (or ~/.cache)/horovod/tf-standin-gpu/<hash>.
"""

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(os.path.dirname(HERE), 'standin')
REPO = os.path.abspath(os.path.join(HERE, '..', '..', '..'))
LIBRARY = 'libhvd_tf_standin_gpu.so'
TF_LIBRARY = 'libtensorflow_framework.so.2'


def tensorflow_paths():
    """(include folder, libtensorflow_framework path, version) of the installed TensorFlow,
    found without importing it. Raises RuntimeError naming what is missing."""
    spec = importlib.util.find_spec('tensorflow')
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError('TensorFlow is not installed (the stand-in GPU device is a TensorFlow plugin)')
    root = list(spec.submodule_search_locations)[0]
    include = os.path.join(root, 'include')
    library = os.path.join(root, TF_LIBRARY)
    header = os.path.join(include, 'tensorflow', 'c', 'experimental', 'stream_executor', 'stream_executor.h')
    for path in (header, library):
        if not os.path.exists(path):
            raise RuntimeError('the installed TensorFlow (%s) has no %s' % (root, path))
    version = ''
    with open(os.path.join(include, 'tensorflow', 'core', 'public', 'release_version.h')) as f:
        for line in f:
            if line.startswith('#define TF_') and '_VERSION' in line:
                version += line.split()[-1] + '.'
    return include, library, version.strip('.')


def _build_key(include, library, version):
    digest = hashlib.sha256()
    files = [os.path.join(STANDIN, 'headers.cmake'), os.path.join(REPO, 'cpp', 'backends', 'cuda', 'cuda_api.h'),
             os.path.join(REPO, 'cpp', 'include', 'horovod', 'types.h')]
    files += [os.path.join(HERE, name) for name in sorted(os.listdir(HERE))
              if name.endswith(('.cc', '.h', '.txt'))]
    for path in files:
        digest.update(os.path.basename(path).encode())
        with open(path, 'rb') as f:
            digest.update(f.read())
    stat = os.stat(library)
    digest.update(('%s|%s|%d|%d' % (version, library, stat.st_size, stat.st_mtime_ns)).encode())
    return digest.hexdigest()[:16]


def library_path():
    """The plugin's path, built first when missing. Raises RuntimeError (with the build's output)
    when it cannot be built: no TensorFlow, no cuda_runtime_api.h."""
    include, library, version = tensorflow_paths()
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    build = os.path.join(cache, 'horovod', 'tf-standin-gpu', _build_key(include, library, version))
    os.makedirs(build, exist_ok=True)
    path = os.path.join(build, LIBRARY)
    with open(os.path.join(build, '.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            return path
        configure = ['cmake', '-S', HERE, '-B', build, '-DCMAKE_BUILD_TYPE=RelWithDebInfo',
                     '-DHVD_TF_INCLUDE_DIR=' + include, '-DHVD_TF_LIBRARY=' + library]
        if shutil.which('ninja') and not os.path.exists(os.path.join(build, 'Makefile')):
            configure += ['-G', 'Ninja']
        if shutil.which('ccache'):
            configure += ['-DCMAKE_CXX_COMPILER_LAUNCHER=ccache']
        for command in (configure, ['cmake', '--build', build, '-j', '2']):
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if result.returncode != 0:
                raise RuntimeError('building the stand-in GPU plugin failed: %s\n%s'
                                   % (' '.join(command), result.stdout))
    if not os.path.exists(path):
        raise RuntimeError('building the stand-in GPU plugin produced no %s in %s' % (LIBRARY, build))
    return path


if __name__ == '__main__':
    try:
        print(library_path())
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
