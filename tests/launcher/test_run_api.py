"""horovod.run(): functions run on every rank through horovodrun, results in rank order."""

import os
import subprocess
import sys
import textwrap

import pytest

from launcher_util import ROOT

PYTHON_DIR = os.path.join(ROOT, 'python')


@pytest.fixture
def run_python(hvdrun, tmp_path):
    """Runs a driver script that uses horovod.runner in a fresh interpreter (so a broken
    horovod package on the path cannot affect pytest itself)."""

    def _run(body, timeout=120):
        script = tmp_path / 'driver.py'
        script.write_text(textwrap.dedent(body))
        env = dict(os.environ, HOROVOD_RUN_BINARY=hvdrun,
                   PYTHONPATH=PYTHON_DIR + os.pathsep + os.environ.get('PYTHONPATH', ''))
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=tmp_path)

    return _run


def test_results_in_rank_order(run_python):
    r = run_python('''
        from horovod.runner import run
        def f(base, scale=1):
            import os
            return (int(os.environ['HOROVOD_RANK']), int(os.environ['HOROVOD_SIZE']), base * scale)
        print(run(f, args=(7,), kwargs={'scale': 3}, num_proc=4))
    ''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([(rank, 4, 21) for rank in range(4)])


def test_closure_and_objects_are_pickled(run_python):
    r = run_python('''
        from horovod.runner import run
        offset = {'value': 100}
        print(run(lambda: offset['value'] + 1, num_proc=2, hosts='localhost:1,127.0.0.1:1'))
    ''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == '[101, 101]'


def test_raising_function(run_python):
    r = run_python('''
        from horovod.runner import run
        def f():
            import os
            if os.environ['HOROVOD_RANK'] == '1':
                raise ValueError('boom')
            return 0
        try:
            run(f, num_proc=2)
        except RuntimeError as e:
            print('RuntimeError:', e)
    ''')
    assert r.returncode == 0, r.stderr
    assert '[1]<stderr>:User function raise error: boom' in r.stderr
    assert ('RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing '
            'the job to be terminated. The first process to do so was:\nProcess name: 1\nExit code: 1') in r.stdout


def test_argument_validation_and_deprecations(run_python):
    r = run_python('''
        import warnings
        from horovod.runner import run
        for kwargs in ({'hosts': 'a:1', 'hostfile': 'h'}, {'use_gloo': True, 'use_mpi': True}):
            try:
                run(print, **kwargs)
            except ValueError as e:
                print('ValueError:', e)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            print(run(lambda: 5, np=2))
        print(sorted({str(w.category.__name__) for w in caught}))
    ''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        'ValueError: Argument hosts and hostfile only allow one provided.',
        'ValueError: Argument use_gloo and use_mpi only allow one set True.',
        '[5, 5]',
        "['DeprecationWarning']",
    ]


def _installed_horovod_with_torch():
    """Whether this interpreter imports torch and a built horovod (with its core extension)."""
    probe = 'import torch, horovod._core, horovod.torch'
    return subprocess.run([sys.executable, '-c', probe], capture_output=True, cwd='/',
                          timeout=120).returncode == 0


@pytest.mark.skipif(not _installed_horovod_with_torch(), reason='needs torch and an installed horovod')
def test_function_importing_torch(hvdrun, tmp_path):
    # The installed package (not the source tree): the function imports torch and allreduces.
    # Workers used to get horovod's package directory on PYTHONPATH, so `import torch` found
    # horovod/torch instead of PyTorch.
    script = tmp_path / 'driver.py'
    script.write_text(textwrap.dedent('''
        import os
        import horovod
        from horovod.runner import run

        def f():
            import torch
            import horovod
            import horovod.torch as hvd
            hvd.init()
            try:
                out = hvd.allreduce(torch.tensor([1.0, 2.0]) * (hvd.rank() + 1), op=hvd.Sum, name='x')
                return (hvd.rank(), torch.__name__, hasattr(torch, 'tensor'),
                        os.path.realpath(horovod.__file__), out.tolist())
            finally:
                hvd.shutdown()

        for result in run(f, num_proc=2):
            print(result)
        print(os.path.realpath(horovod.__file__))
    '''))
    env = dict(os.environ, HOROVOD_RUN_BINARY=hvdrun)
    env.pop('PYTHONPATH', None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    package = lines[-1]
    assert lines[:-1] == [str((rank, 'torch', True, package, [3.0, 6.0])) for rank in range(2)]


@pytest.mark.skipif(subprocess.run(['which', 'mpirun'], capture_output=True).returncode != 0, reason='no mpirun')
def test_use_mpi(run_python):
    r = run_python('''
        from horovod.runner import run
        print(run(lambda: 'ok', num_proc=2, use_mpi=True))
    ''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['ok', 'ok']"


def test_run_task_rank_fallbacks():
    # horovod.run files each result under this rank; user code imports it from Horovod's path.
    sys.path.insert(0, PYTHON_DIR)
    try:
        from horovod.runner.common.util.env import get_env_rank_and_size as rank_and_size
    finally:
        sys.path.pop(0)
    saved = dict(os.environ)
    try:
        for name in ('HOROVOD_RANK', 'HOROVOD_SIZE', 'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'PMI_RANK',
                     'PMI_SIZE'):
            os.environ.pop(name, None)
        assert rank_and_size() == (0, 1)
        os.environ.update(PMI_RANK='2', PMI_SIZE='3')
        assert rank_and_size() == (2, 3)
        os.environ.update(OMPI_COMM_WORLD_RANK='1', OMPI_COMM_WORLD_SIZE='4')
        assert rank_and_size() == (1, 4)
        os.environ['HOROVOD_RANK'] = '0'
        with pytest.raises(RuntimeError, match='only one of HOROVOD_RANK and HOROVOD_SIZE found in environment'):
            rank_and_size()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_task_service_refuses_wrong_secret():
    sys.path.insert(0, PYTHON_DIR)
    try:
        from horovod.runner.task_service import AuthenticationError, TaskClient, TaskService
    finally:
        sys.path.pop(0)
    service = TaskService('right', b'payload', bind_host='127.0.0.1')
    try:
        assert TaskClient('127.0.0.1', service.port, 'right', 0).fetch_function() == b'payload'
        with pytest.raises(AuthenticationError):
            TaskClient('127.0.0.1', service.port, 'wrong', 0).fetch_function()
        TaskClient('127.0.0.1', service.port, 'right', 3).send_result(b'r3')
        assert service.results() == {3: b'r3'}
        assert service.refused == 1
    finally:
        service.shutdown()


def test_task_service_bounds_its_handshakes_and_tells_a_dropped_client():
    sys.path.insert(0, PYTHON_DIR)
    try:
        from horovod.runner import task_service as ts
    finally:
        sys.path.pop(0)
    import socket
    service = ts.TaskService('right', b'payload', bind_host='127.0.0.1')
    try:
        def silent():
            s = socket.create_connection(('127.0.0.1', service.port), timeout=30)
            assert len(ts._recv_exact(s, ts.NONCE_BYTES)) == ts.NONCE_BYTES  # its handler runs
            return s
        first = silent()
        holders = [silent() for _ in range(ts.MAX_PENDING_HANDSHAKES)]
        # The oldest pending connection made room for the newest and was told it was busy.
        assert ts._recv_exact(first, ts.DIGEST_BYTES) == ts.BUSY_ANSWER
        # A real client gets in past a full handshake queue (connecting again if it is dropped).
        assert ts.TaskClient('127.0.0.1', service.port, 'right', 0).fetch_function() == b'payload'
        assert service._server.dropped_busy >= 2
        for s in holders + [first]:
            s.close()
    finally:
        service.shutdown()
