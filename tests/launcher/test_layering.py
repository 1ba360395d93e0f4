"""scripts/check_layering.py on small trees: allowed includes pass, forbidden ones are reported
(and fail the check unless --list)."""

import subprocess
import sys

from launcher_util import ROOT

SCRIPT = ROOT + '/scripts/check_layering.py'


def check(root, *flags):
    return subprocess.run([sys.executable, SCRIPT, '--root', str(root)] + list(flags), capture_output=True,
                          text=True, timeout=60)


def write(root, rel, *includes):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(''.join('#include "{}"\n'.format(h) for h in includes) + '#include <vector>\n')


def make_tree(root):
    write(root, 'cpp/common/check.h', 'horovod/errors.h')
    write(root, 'cpp/include/horovod/errors.h')
    write(root, 'cpp/transport/transport.h', 'common/check.h')
    write(root, 'cpp/transport/shm/segment.h', 'transport/transport.h')
    write(root, 'cpp/transport/composite.cc', 'transport/shm/segment.h')  # the listed exception
    write(root, 'cpp/engine/runtime.h', 'transport/transport.h', 'runtime_helper.h')
    write(root, 'cpp/engine/runtime_helper.h')


def test_good_tree_passes(tmp_path):
    make_tree(tmp_path)
    r = check(tmp_path)
    assert (r.returncode, r.stdout) == (0, ''), r.stdout + r.stderr


def test_bad_include_is_reported(tmp_path):
    make_tree(tmp_path)
    write(tmp_path, 'cpp/engine/executor.cc', 'engine/runtime.h', 'transport/shm/segment.h')
    write(tmp_path, 'cpp/common/logging.h', 'common/check.h', 'engine/runtime.h')
    r = check(tmp_path)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        'cpp/common/logging.h:2: common may not include engine/runtime.h (layer order)',
        'cpp/engine/executor.cc:2: engine may not include transport/shm/segment.h '
        '(no concrete transport backend above transport)',
    ]
    listed = check(tmp_path, '--list')
    assert (listed.returncode, listed.stdout) == (0, r.stdout)


def test_framework_kernels_see_only_public_headers(tmp_path):
    make_tree(tmp_path)
    write(tmp_path, 'cpp/include/horovod/api_table.h', 'horovod/errors.h')
    write(tmp_path, 'cpp/frameworks/tensorflow/kernels.cc', 'horovod/api_table.h', 'tf_c_api.h',
          'engine/runtime.h', 'common/check.h')
    write(tmp_path, 'cpp/frameworks/tensorflow/tf_c_api.h')
    r = check(tmp_path)
    assert r.stdout.splitlines() == [
        'cpp/frameworks/tensorflow/kernels.cc:3: frameworks may not include engine/runtime.h '
        '(framework kernels see only the public headers)',
        'cpp/frameworks/tensorflow/kernels.cc:4: frameworks may not include common/check.h '
        '(framework kernels see only the public headers)',
    ], r.stdout + r.stderr
