"""Plain mpirun / mpiexec / srun launches, without horovodrun (docs/mpi.md).

Each case starts real processes with Debian's Open MPI (``mpirun.openmpi``) or MPICH
(``mpiexec.mpich``), named explicitly so that the mpirun alternative does not matter, or with the
variables srun sets. Every run is bounded by a timeout that kills its process group. Cases whose
MPI (or mpi4py built for it) is missing are skipped, naming what is missing.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from launch_util import run_bounded

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, 'mpi_scripts')
TIMEOUT = int(os.environ.get('HOROVOD_TEST_TIMEOUT', '300'))

try:
    from horovod import _core
except ImportError:
    _core = None


def _mpirun(flavor, np_):
    if flavor == 'openmpi':
        exe = shutil.which('mpirun.openmpi')
        if exe is None:
            pytest.skip('mpirun.openmpi not found (apt-get install openmpi-bin)')
        cmd = [exe, '-np', str(np_), '--oversubscribe']
        if os.geteuid() == 0:
            cmd.append('--allow-run-as-root')
        return cmd
    exe = shutil.which('mpiexec.mpich')
    if exe is None:
        pytest.skip('mpiexec.mpich not found (apt-get install mpich)')
    return [exe, '-np', str(np_)]


def _env(**extra):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(('HOROVOD_', 'OMPI_', 'PMI_', 'PMIX_', 'SLURM_')) and name != 'HOROVOD_TEST_TIMEOUT':
            del env[name]
    env['PYTHONUNBUFFERED'] = '1'
    env.update(extra)
    return env


def _run(cmd, env, timeout=TIMEOUT, cwd=HERE):
    return run_bounded(cmd, env, timeout, cwd=cwd)


def _require_mpi_built():
    if _core is None or not _core.mpi_built():
        pytest.skip('horovod._core has no MPI plugin (build with libopenmpi-dev / libmpich-dev installed)')


def _oks(out):
    return sorted(line.split()[1] for line in out.splitlines() if line.startswith('OK '))


@pytest.mark.parametrize('np_', [2, 3])
@pytest.mark.parametrize('flavor', ['openmpi', 'mpich'])
def test_plain_launch(flavor, np_):
    _require_mpi_built()
    code, out = _run(_mpirun(flavor, np_) + [sys.executable, os.path.join(SCRIPTS, 'plain_worker.py')], _env())
    assert code == 0, out[-8000:]
    assert _oks(out) == [str(r) for r in range(np_)], out[-8000:]


def test_threads_disable():
    _require_mpi_built()
    cmd = _mpirun('openmpi', 2) + ['-x', 'HOROVOD_MPI_THREADS_DISABLE',
                                   sys.executable, os.path.join(SCRIPTS, 'plain_worker.py')]
    code, out = _run(cmd, _env(HOROVOD_MPI_THREADS_DISABLE='1'))
    assert code == 0, out[-8000:]
    assert _oks(out) == ['0', '1'], out[-8000:]


@pytest.mark.parametrize('flavor,np_', [('openmpi', 2), ('mpich', 3)])
def test_torch_suite_under_plain_mpirun(flavor, np_):
    # Horovod's own torch tests, as under horovodrun, with nothing but the MPI launcher.
    _require_mpi_built()
    pytest.importorskip('torch')
    cmd = _mpirun(flavor, np_) + [sys.executable, '-m', 'pytest', '-x', '-q', '-p', 'no:cacheprovider',
                                  os.path.join(HERE, 'test_torch.py')]
    code, out = _run(cmd, _env(), timeout=max(TIMEOUT, 600))
    assert code == 0, out[-12000:]
    assert out.count(' passed') == np_, out[-12000:]


def _mpi4py_env(flavor, tmp_path):
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip('mpi4py not installed (pip install mpi4py==4.1.2)')
    if flavor == 'openmpi':
        return _env()  # mpi4py's wheel loads libmpi.so: Open MPI's on Debian
    # mpi4py's wheel carries an MPICH-ABI module linked to libmpi.so.12, MPICH's standard ABI
    # name; Debian names the same library libmpich.so.12 (docs/mpi.md).
    libmpich = '/usr/lib/x86_64-linux-gnu/libmpich.so.12'
    if not os.path.exists(libmpich):
        pytest.skip('{} not found (apt-get install libmpich-dev)'.format(libmpich))
    os.symlink(libmpich, str(tmp_path / 'libmpi.so.12'))
    return _env(MPI4PY_MPIABI='mpich', MPI4PY_LIBMPI=str(tmp_path / 'libmpi.so.12'),
                LD_LIBRARY_PATH=str(tmp_path))


@pytest.mark.parametrize('case', ['world', 'sub', 'dynamic', 'late'])
@pytest.mark.parametrize('flavor', ['openmpi', 'mpich'])
def test_mpi4py_interplay(flavor, case, tmp_path):
    _require_mpi_built()
    pytest.importorskip('torch')
    env = _mpi4py_env(flavor, tmp_path)
    script = {'dynamic': 'mpi4py_dynamic_worker.py', 'late': 'mpi4py_late_worker.py'}.get(case, 'mpi4py_worker.py')
    args = [case] if script == 'mpi4py_worker.py' else []
    code, out = _run(_mpirun(flavor, 3) + [sys.executable, os.path.join(SCRIPTS, script)] + args, env)
    assert code == 0, out[-8000:]
    assert _oks(out) == ['0', '1', '2'], out[-8000:]


@pytest.mark.parametrize('case', ['world', 'sub', 'dynamic'])
def test_mpi4py_interplay_on_mpi_data_plane(case, tmp_path):
    # The same programs with Horovod's collectives run by MPI on communicators of their own (from
    # the sub-communicator given to init, and per process set), interleaved with mpi4py's.
    _require_mpi_built()
    pytest.importorskip('torch')
    env = _mpi4py_env('openmpi', tmp_path)
    names = {'HOROVOD_CPU_OPERATIONS': 'mpi', 'HOROVOD_LOG_LEVEL': 'debug'}
    env.update(names)
    script = 'mpi4py_dynamic_worker.py' if case == 'dynamic' else 'mpi4py_worker.py'
    args = [] if case == 'dynamic' else [case]
    cmd = _mpirun('openmpi', 3) + _mpi_env_args('openmpi', names) + [sys.executable, os.path.join(SCRIPTS, script)]
    code, out = _run(cmd + args, env)
    assert code == 0, out[-8000:]
    assert _oks(out) == ['0', '1', '2'], out[-8000:]
    assert 'MPI data plane (HOROVOD_CPU_OPERATIONS=mpi)' in out, out[-8000:]


def _mpi_env_args(flavor, names):
    # Open MPI passes only the variables named with -x; MPICH's Hydra passes the whole environment.
    return [a for name in names for a in ('-x', name)] if flavor == 'openmpi' else []


@pytest.mark.parametrize('data_plane', ['mpi', 'default'])
@pytest.mark.parametrize('flavor', ['openmpi', 'mpich'])
def test_data_plane_collectives(flavor, data_plane):
    # Every collective and dtype (float16/bfloat16/bool reductions too) through MPI's own
    # collectives with HOROVOD_CPU_OPERATIONS=mpi, checked against the engine's count of MPI
    # collectives (zero on the default data plane), at 3 ranks; the debug log names the data plane
    # of each process set and why.
    _require_mpi_built()
    pytest.importorskip('torch')
    extra = {'HOROVOD_LOG_LEVEL': 'debug'}
    if data_plane == 'mpi':
        extra['HOROVOD_CPU_OPERATIONS'] = 'mpi'
    cmd = _mpirun(flavor, 3) + _mpi_env_args(flavor, extra) + [sys.executable,
                                                               os.path.join(SCRIPTS, 'data_plane_worker.py')]
    code, out = _run(cmd, _env(**extra))
    assert code == 0, out[-8000:]
    assert _oks(out) == ['0', '1', '2'], out[-8000:]
    chosen = 'MPI data plane (HOROVOD_CPU_OPERATIONS=mpi)'
    if data_plane == 'mpi':
        assert out.count('process set 0 [0, 1, 2]: ' + chosen) == 3, out[-8000:]
        assert out.count('through the mpi collective backend') >= 3 + 2 * 3, out[-8000:]
    else:
        assert chosen not in out and 'through the cpu collective backend' in out, out[-8000:]


@pytest.mark.parametrize('flavor', ['openmpi', 'mpich'])
def test_torch_suite_on_mpi_data_plane(flavor):
    # Horovod's own torch tests with every collective run by MPI.
    _require_mpi_built()
    pytest.importorskip('torch')
    cmd = _mpirun(flavor, 2) + _mpi_env_args(flavor, ['HOROVOD_CPU_OPERATIONS']) + [
        sys.executable, '-m', 'pytest', '-x', '-q', '-p', 'no:cacheprovider', os.path.join(HERE, 'test_torch.py')]
    code, out = _run(cmd, _env(HOROVOD_CPU_OPERATIONS='mpi'), timeout=max(TIMEOUT, 600))
    assert code == 0, out[-12000:]
    assert out.count(' passed') == 2, out[-12000:]


def test_mpi_data_plane_with_threads_disabled():
    # HOROVOD_MPI_THREADS_DISABLE with the MPI data plane: MPI_THREAD_SERIALIZED (the engine's
    # collectives run on one thread at a time), not SINGLE.
    _require_mpi_built()
    pytest.importorskip('torch')
    names = {'HOROVOD_CPU_OPERATIONS': 'mpi', 'HOROVOD_MPI_THREADS_DISABLE': '1'}
    code_text = ('import os, horovod.torch as hvd, torch\n'
                 'hvd.init()\n'
                 'assert not hvd.mpi_threads_supported()\n'
                 'x = hvd.allreduce(torch.ones(3), op=hvd.Sum)\n'
                 'assert torch.equal(x, torch.full((3,), 2.0)), x\n'
                 'assert sum(n for (b, _), n in hvd.engine_counters().items() if b == "mpi") >= 1\n'
                 'os.write(1, "OK {}\\n".format(hvd.rank()).encode())\n')  # one write: no interleaving
    cmd = _mpirun('openmpi', 2) + _mpi_env_args('openmpi', names) + [sys.executable, '-c', code_text]
    code, out = _run(cmd, _env(**names), timeout=120)
    assert code == 0, out[-8000:]
    assert _oks(out) == ['0', '1'], out[-8000:]


def test_mpi_data_plane_under_horovodrun_mpi():
    # horovodrun --mpi: horovodrun's rendezvous, processes started by mpirun; the MPI data plane
    # initializes MPI itself and runs the collectives.
    _require_mpi_built()
    pytest.importorskip('torch')
    hvdrun = os.environ.get('HOROVODRUN') or shutil.which('horovodrun')
    mpirun = shutil.which('mpirun')
    if hvdrun is None or mpirun is None:
        pytest.skip('horovodrun or mpirun not on PATH')
    version = subprocess.run([mpirun, '--version'], capture_output=True, text=True, timeout=30)
    if 'Open MPI' not in version.stdout + version.stderr:
        pytest.skip('mpirun is not Open MPI (horovodrun --mpi passes Open MPI options)')
    code_text = ('import os, horovod.torch as hvd, torch\n'
                 'hvd.init()\n'
                 'x = hvd.allreduce(torch.ones(3) * (hvd.rank() + 1), op=hvd.Sum)\n'
                 'assert torch.equal(x, torch.full((3,), 3.0)), x\n'
                 'assert sum(n for (b, _), n in hvd.engine_counters().items() if b == "mpi") >= 1\n'
                 'os.write(1, "OK {}\\n".format(hvd.rank()).encode())\n')
    code, out = _run([hvdrun, '--mpi', '-np', '2', sys.executable, '-c', code_text],
                     _env(HOROVOD_CPU_OPERATIONS='mpi'), timeout=180)
    assert code == 0, out[-8000:]
    oks = sorted(line.split('OK ')[-1].strip() for line in out.splitlines() if 'OK ' in line)
    assert oks == ['0', '1'], out[-8000:]


def test_cpu_operations_mpi_without_mpi_fails_on_every_rank():
    # horovodrun without --mpi starts no MPI: HOROVOD_CPU_OPERATIONS=mpi is refused by every rank
    # with the reason and the fix (not silently replaced by the default data plane).
    _require_mpi_built()
    hvdrun = os.environ.get('HOROVODRUN') or shutil.which('horovodrun')
    if hvdrun is None:
        pytest.skip('horovodrun not on PATH (nor HOROVODRUN set)')
    # Each rank catches the refusal, so that horovodrun does not stop the other before it refused.
    code_text = ('import os, horovod.torch as hvd\n'
                 'try:\n'
                 '    hvd.init()\n'
                 'except ValueError:\n'
                 '    print("REFUSED", os.environ["HOROVOD_RANK"], flush=True)\n')
    code, out = _run([hvdrun, '-np', '2', sys.executable, '-c', code_text], _env(HOROVOD_CPU_OPERATIONS='mpi'),
                     timeout=120)
    assert code == 0, out[-8000:]
    assert sorted(line.split()[-1] for line in out.splitlines() if 'REFUSED' in line) == ['0', '1'], out[-8000:]
    line = ('[horovod] init failed: ValueError: HOROVOD_CPU_OPERATIONS=mpi: this job was not started by MPI '
            '(launched by horovod)')
    assert out.count(line) == 2, out[-8000:]


@pytest.mark.parametrize('flavor', ['openmpi', 'mpich'])
def test_rank_that_never_calls_init_is_named(flavor, tmp_path):
    # Rank 1 of 3 starts MPI (mpi4py) but never calls hvd.init(): rank 0 names it once
    # HOROVOD_GLOO_TIMEOUT_SECONDS passed, and rank 2 fails too, instead of both waiting in MPI
    # forever. (A process that never starts MPI at all holds the others inside MPI_Init, MPI's own
    # startup exchange, before Horovod runs: docs/mpi.md.)
    _require_mpi_built()
    env = _mpi4py_env(flavor, tmp_path)
    env['HOROVOD_GLOO_TIMEOUT_SECONDS'] = '4'
    code_text = ('import os, sys, time\n'
                 'from mpi4py import MPI\n'
                 'if MPI.COMM_WORLD.rank == 1:\n'
                 '    time.sleep(60)\n'
                 '    sys.exit(0)\n'
                 'import horovod.torch as hvd\n'
                 'try:\n'
                 '    hvd.init()\n'
                 'except ValueError:\n'
                 '    os.write(1, "FAILED {}\\n".format(MPI.COMM_WORLD.rank).encode())\n'  # one write
                 '    os._exit(3)\n')
    cmd = _mpirun(flavor, 3) + _mpi_env_args(flavor, ['HOROVOD_GLOO_TIMEOUT_SECONDS']) + [
        sys.executable, '-c', code_text]
    start = time.time()
    code, out = _run(cmd, env, timeout=50)
    assert code != 0
    assert time.time() - start < 40, out[-8000:]
    assert 'MPI bootstrap: rank 1 of 3 did not call hvd.init() within 4.0 s (HOROVOD_GLOO_TIMEOUT_SECONDS)' in out, \
        out[-8000:]
    assert 'FAILED 0' in out, out[-8000:]


def test_controller_mpi_without_a_loadable_plugin(tmp_path):
    # A core whose MPI plugins are missing (or whose libmpi cannot be loaded): one clear line.
    _require_mpi_built()
    pkg = os.path.dirname(os.path.abspath(_core.__file__))
    shutil.copytree(pkg, tmp_path / 'horovod', ignore=shutil.ignore_patterns('libhorovod_mpi_*', '__pycache__'))
    code, out = _run([sys.executable, '-c', 'import horovod.torch as hvd; hvd.init()'],
                     _env(HOROVOD_CONTROLLER='mpi', PYTHONPATH=str(tmp_path)), timeout=120)
    assert code != 0
    assert "could not load Horovod's MPI plugin" in out, out[-4000:]


def test_stale_plugin_is_refused_naming_its_abi(tmp_path):
    # A plugin from another Horovod build (an older table layout) must not be called into: init
    # names both ABIs and the fix.
    _require_mpi_built()
    cc = shutil.which('cc') or shutil.which('gcc')
    if cc is None:
        pytest.skip('no C compiler to build a stale plugin')
    pkg = os.path.dirname(os.path.abspath(_core.__file__))
    shutil.copytree(pkg, tmp_path / 'horovod', ignore=shutil.ignore_patterns('libhorovod_mpi_*', '__pycache__'))
    source = tmp_path / 'stale.c'
    source.write_text('struct table { int abi; const char* flavor; };\n'
                      'static const struct table t = {1, "openmpi"};\n'
                      'const void* hvd_mpi_plugin(void) { return &t; }\n')
    for flavor in _core_flavors():
        subprocess.run([cc, '-shared', '-fPIC', '-o', str(tmp_path / 'horovod' / 'libhorovod_mpi_{}.so'.format(flavor)),
                        str(source)], check=True, timeout=60)
    code, out = _run([sys.executable, '-c', 'import horovod.torch as hvd; hvd.init()'],
                     _env(HOROVOD_CONTROLLER='mpi', PYTHONPATH=str(tmp_path)), timeout=120)
    assert code != 0
    header = os.path.join(os.path.dirname(__file__), '..', '..', 'cpp', 'mpi', 'plugin_api.h')
    with open(header) as f:
        abi = re.search(r'#define HVD_MPI_PLUGIN_ABI (\d+)', f.read()).group(1)
    assert 'a stale Horovod MPI plugin (plugin ABI 1, this core needs {})'.format(abi) in out, out[-4000:]


def _core_flavors():
    pkg = os.path.dirname(os.path.abspath(_core.__file__))
    return [f[len('libhorovod_mpi_'):-len('.so')] for f in os.listdir(pkg) if f.startswith('libhorovod_mpi_')]


def _srun_env(rank, size, nodes, node_of, local_of, job='4242', step='0'):
    return _env(SLURM_PROCID=str(rank), SLURM_NTASKS=str(size), SLURM_STEP_NUM_TASKS=str(size),
                SLURM_LOCALID=str(local_of[rank]), SLURM_NODEID=str(node_of[rank]), SLURM_JOB_ID=job,
                SLURM_STEP_ID=step, SLURM_STEP_NUM_NODES=str(len(nodes)),
                SLURM_STEP_NODELIST=','.join(nodes), SLURM_JOB_NODELIST=','.join(nodes),
                HOROVOD_HOSTNAME=nodes[node_of[rank]], HOROVOD_GLOO_TIMEOUT_SECONDS='60')


@pytest.mark.parametrize('layout', ['one_node', 'two_nodes'])
def test_srun_environment(layout):
    # The variables srun sets, without MPI: task 0 of node 0 serves the rendezvous on a port
    # derived from the job and step ids. 'two_nodes' fakes two hosts on this one (HOROVOD_HOSTNAME,
    # the first node named localhost), so the cross-node path (TCP, all-interface server) runs.
    pytest.importorskip('torch')
    size = 3
    if layout == 'one_node':
        nodes, node_of, local_of = ['localhost'], [0, 0, 0], [0, 1, 2]
    else:
        nodes, node_of, local_of = ['localhost', 'node-b'], [0, 0, 1], [0, 1, 0]
    code = ('import horovod.torch as hvd, torch, os\n'
            'hvd.init()\n'
            'assert (hvd.rank(), hvd.size()) == (int(os.environ["SLURM_PROCID"]), 3)\n'
            'assert not hvd.mpi_enabled()\n'
            'x = hvd.allreduce(torch.ones(4), op=hvd.Sum)\n'
            'assert torch.equal(x, torch.full((4,), 3.0)), x\n'
            'print("OK", hvd.rank(), hvd.local_rank(), hvd.cross_rank(), flush=True)\n')
    job = str(5000 + os.getpid() % 1000)  # a port of its own per test run
    procs = [subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True,
                              env=_srun_env(r, size, nodes, node_of, local_of, job=job,
                                            step='0' if layout == 'one_node' else '1'))
             for r in range(size)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=TIMEOUT)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            pytest.fail('srun-style launch timed out')
    assert [p.returncode for p in procs] == [0] * size, '\n'.join(outs)
    lines = sorted(line for out in outs for line in out.splitlines() if line.startswith('OK '))
    expected = ['OK {} {} {}'.format(r, local_of[r], node_of[r]) for r in range(size)]
    assert lines == expected, '\n'.join(outs)



def test_launcher_and_library_mismatch_fails_on_every_rank():
    # mpi4py loads Open MPI's libmpi under MPICH's mpiexec: each process is an MPI singleton.
    # Horovod must refuse instead of running three one-rank jobs.
    _require_mpi_built()
    env = _mpi4py_env('openmpi', None)
    code_text = 'from mpi4py import MPI\nimport horovod.torch as hvd\nhvd.init()\n'
    code, out = _run(_mpirun('mpich', 3) + [sys.executable, '-c', code_text], env, timeout=120)
    assert code != 0
    assert out.count('the MPI loaded in this process is not the launcher') >= 3, out[-8000:]
