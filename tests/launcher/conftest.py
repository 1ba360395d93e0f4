"""Tests of the horovodrun executable. The binary is $HOROVODRUN if set (and non-empty), else
$BUILD_DIR/launcher/horovodrun, else build/launcher/horovodrun, else the most recently built
build*/launcher/horovodrun of this checkout. Every launcher run is bounded by
a subprocess timeout, so a hang fails the test instead of the suite."""

import glob
import os
import subprocess
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TIMEOUT = 60


def _find_binary():
    explicit = os.environ.get('HOROVODRUN')
    if explicit:
        return explicit
    for build_dir in (os.environ.get('BUILD_DIR'), 'build'):
        if build_dir:
            path = os.path.join(ROOT, build_dir, 'launcher', 'horovodrun')
            if os.access(path, os.X_OK):
                return path
    built = [p for p in glob.glob(os.path.join(ROOT, 'build*', 'launcher', 'horovodrun')) if os.access(p, os.X_OK)]
    if not built:
        return None
    return max(built, key=os.path.getmtime)


@pytest.fixture(scope='session')
def hvdrun():
    binary = _find_binary()
    if binary is None:
        pytest.skip('horovodrun is not built (set HOROVODRUN or build build*/launcher/horovodrun)')
    return binary


@pytest.fixture
def run(hvdrun):
    """run(*args, timeout=60, env=None, extra_env=None, cwd=None) -> CompletedProcess (text)."""

    def _run(*args, timeout=DEFAULT_TIMEOUT, env=None, extra_env=None, cwd=None):
        environment = dict(os.environ if env is None else env)
        environment.update(extra_env or {})
        result = subprocess.run([hvdrun] + [str(a) for a in args], capture_output=True, timeout=timeout,
                                env=environment, cwd=cwd)
        # Decoded by hand: text mode would turn the '\r' the launcher forwards into '\n'.
        result.stdout = result.stdout.decode('utf-8', errors='replace')
        result.stderr = result.stderr.decode('utf-8', errors='replace')
        return result

    return _run


@pytest.fixture
def marker():
    """A unique `sleep` duration: its process is findable with pgrep -f and no other has it."""
    return '300.{}'.format(uuid.uuid4().int % 10 ** 9)


KNOB_NAMES = [
    'HOROVOD_FUSION_THRESHOLD', 'HOROVOD_CYCLE_TIME', 'HOROVOD_CACHE_CAPACITY', 'HOROVOD_HIERARCHICAL_ALLREDUCE',
    'HOROVOD_HIERARCHICAL_ALLGATHER', 'HOROVOD_TORUS_ALLREDUCE', 'HOROVOD_AUTOTUNE', 'HOROVOD_AUTOTUNE_LOG',
    'HOROVOD_AUTOTUNE_WARMUP_SAMPLES', 'HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE', 'HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES',
    'HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE', 'HOROVOD_TIMELINE', 'HOROVOD_TIMELINE_MARK_CYCLES',
    'HOROVOD_STALL_CHECK_DISABLE', 'HOROVOD_STALL_CHECK_TIME_SECONDS', 'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS',
    'HOROVOD_MPI_THREADS_DISABLE', 'NCCL_IB_DISABLE', 'HOROVOD_NUM_NCCL_STREAMS', 'HOROVOD_THREAD_AFFINITY',
    'HOROVOD_GLOO_TIMEOUT_SECONDS', 'HOROVOD_LOG_LEVEL', 'HOROVOD_LOG_HIDE_TIME',
]


@pytest.fixture
def check_program(hvdrun):
    """The horovodrun_allreduce_check program (a C++ worker that allreduces once), next to the
    horovodrun under test or in a build directory; the test is skipped when it is not built."""
    candidates = [os.path.join(os.path.dirname(hvdrun), 'horovodrun_allreduce_check')]
    candidates += sorted(glob.glob(os.path.join(ROOT, 'build*', 'launcher', 'horovodrun_allreduce_check')),
                         key=os.path.getmtime, reverse=True)
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    pytest.skip('horovodrun_allreduce_check not built (needs the C++ library target)')


@pytest.fixture
def knobs(run):
    """knobs(*flags) -> the knob variables the worker sees (only those that are set)."""

    def _knobs(*flags, extra_env=None):
        env = {k: v for k, v in os.environ.items() if k not in KNOB_NAMES}
        env.update(extra_env or {})
        r = run('-np', '1', *flags, 'env', env=env)
        assert r.returncode == 0, r.stderr
        seen = {}
        for line in r.stdout.splitlines():
            body = line.split(':', 1)[1]
            name, _, value = body.partition('=')
            if name in KNOB_NAMES:
                seen[name] = value
        return seen

    return _knobs
