"""horovod.spark.run on a real local Spark: ``local[2]`` (one session for the file) and, in a
child process, ``local-cluster[2,1,1024]`` (two executor JVMs). Bounded by pytest-timeout."""

import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

pyspark = pytest.importorskip('pyspark')
import cloudpickle  # noqa: E402

import horovod.spark  # noqa: E402

pytestmark = pytest.mark.timeout(300)
# The Horovod processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def allreduce_and_topology():
    import os
    import torch
    import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item()
    print('hello from rank', hvd.rank())
    return total, hvd.rank(), hvd.local_rank(), hvd.local_size(), os.environ.get('MY_FLAG')


def test_no_spark_context_is_the_spec_error():
    from pyspark import SparkContext
    assert SparkContext._active_spark_context is None
    with pytest.raises(Exception, match='Could not find an active SparkContext, are you running in a PySpark '
                                        'session?'):
        horovod.spark.run(allreduce_and_topology, num_proc=2)


def test_mpi_arguments_are_checked():
    with pytest.raises(ValueError, match='extra_mpi_args are mpirun arguments; they need use_mpi=True'):
        horovod.spark.run(allreduce_and_topology, extra_mpi_args='-v')
    with pytest.raises(ValueError, match='only allow one'):
        horovod.spark.run(allreduce_and_topology, use_mpi=True, use_gloo=True)


def mpi_engine_counts():
    import torch
    import horovod.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item()
    mpi = sum(n for (backend, _), n in hvd.engine_counters().items() if backend == 'mpi')
    return total, hvd.rank(), hvd.local_rank(), os.environ.get('OMPI_COMM_WORLD_RANK'), mpi, os.environ.get('MY_FLAG')


@pytest.mark.parametrize('data_plane', ['default', 'mpi'])
def test_use_mpi_starts_the_processes_with_mpirun(spark, data_plane):
    # The ranks are started by Open MPI's mpirun through the Spark tasks (its daemon runs in the
    # first task of the host) and take their rank from it; with HOROVOD_CPU_OPERATIONS=mpi the
    # collectives run through MPI too. extra_mpi_args reach mpirun.
    if shutil.which('mpirun') is None or 'Open MPI' not in subprocess.run(
            ['mpirun', '--version'], capture_output=True, text=True).stdout:
        pytest.skip('Open MPI\'s mpirun is not the one on PATH')
    env = {'MY_FLAG': 'on'}
    if data_plane == 'mpi':
        env['HOROVOD_CPU_OPERATIONS'] = 'mpi'
    out, err = io.StringIO(), io.StringIO()
    results = horovod.spark.run(mpi_engine_counts, num_proc=2, use_mpi=True, env=env, stdout=out, stderr=err,
                                extra_mpi_args='--report-bindings')
    assert [r[:4] for r in results] == [(3.0, 0, 0, '0'), (3.0, 1, 1, '1')], results
    assert all(r[5] == 'on' for r in results)
    assert all((r[4] > 0) == (data_plane == 'mpi') for r in results), results
    assert 'MCW rank 0' in out.getvalue() + err.getvalue(), (out.getvalue(), err.getvalue())  # --report-bindings


@pytest.fixture(scope='module')
def spark():
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master('local[2]').appName('horovod-test-spark')
               .config('spark.ui.enabled', 'false').config('spark.ui.showConsoleProgress', 'false')
               .getOrCreate())
    session.sparkContext.setLogLevel('ERROR')
    yield session
    session.stop()


def test_two_processes_allreduce_in_rank_order(spark):
    out = io.StringIO()
    results = horovod.spark.run(allreduce_and_topology, num_proc=2, env={'MY_FLAG': 'on'}, stdout=out,
                                prefix_output_with_timestamp=True)
    assert results == [(3.0, 0, 0, 2, 'on'), (3.0, 1, 1, 2, 'on')]
    asctime = r'\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}'  # horovodrun's layout: the time, then the tag
    for rank in (0, 1):
        line = r'(?m)^' + asctime + r'\[{0}\]<stdout>:hello from rank {0}$'.format(rank)
        assert re.search(line, out.getvalue()), out.getvalue()


def work_dir_and_module():
    import importlib
    import os
    return os.getcwd(), importlib.import_module('hvd_spark_probe_module').VALUE


def test_spark_work_dir_and_pythonpath(spark, tmp_path):
    # HOROVOD_SPARK_WORK_DIR / HOROVOD_SPARK_PYTHONPATH: the processes' working directory and
    # what goes first on their PYTHONPATH, as in Horovod.
    (tmp_path / 'hvd_spark_probe_module.py').write_text('VALUE = 42\n')
    work = tmp_path / 'work'
    work.mkdir()
    results = horovod.spark.run(work_dir_and_module, num_proc=2,
                                env={'HOROVOD_SPARK_WORK_DIR': str(work), 'HOROVOD_SPARK_PYTHONPATH': str(tmp_path)})
    assert results == [(str(work), 42)] * 2


def test_raising_process_cancels_the_job(spark, tmp_path):
    pid_dir = str(tmp_path)

    def fail_on_rank_one():
        import os
        import time
        rank = int(os.environ['HOROVOD_RANK'])
        if rank == 1:
            deadline = time.monotonic() + 60  # fail once rank 0 is up and about to wait for us
            while not os.path.exists(os.path.join(pid_dir, '0')) and time.monotonic() < deadline:
                time.sleep(0.1)
            raise ValueError('bad shard on this rank')
        import horovod.torch as hvd
        with open(os.path.join(pid_dir, '0'), 'w') as f:
            f.write(str(os.getpid()))
        hvd.init()  # waits for rank 1 (up to the 120 s rendezvous timeout) unless its task is cancelled

    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r'(?s)non-zero status.*Process name: 1\nExit code: 1\n.*ValueError: '
                                           r'bad shard on this rank'):
        horovod.spark.run(fail_on_rank_one, num_proc=2, env={'HOROVOD_GLOO_TIMEOUT_SECONDS': '120'})
    assert time.monotonic() - started < 90
    pid = int(open(os.path.join(pid_dir, '0')).read())
    deadline = time.monotonic() + 30
    while os.path.exists('/proc/{}'.format(pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists('/proc/{}'.format(pid)), 'rank 0 outlived its cancelled task'
    # The session is still usable.
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6


def test_start_timeout_cancels_and_says_so(spark):
    with pytest.raises(Exception, match='Timed out waiting for Spark tasks to start'):
        horovod.spark.run(allreduce_and_topology, num_proc=2, start_timeout=0.001)
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6


def test_more_processes_than_slots_is_a_clear_error(spark):
    with pytest.raises(ValueError, match='num_proc=3 is more than the 2 task slots'):
        horovod.spark.run(allreduce_and_topology, num_proc=3)


LOCAL_CLUSTER_SCRIPT = textwrap.dedent('''
    import sys
    import cloudpickle
    from pyspark.sql import SparkSession
    import horovod.spark

    def fn():
        import torch
        import horovod.torch as hvd
        hvd.init()
        return hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item(), hvd.local_size()

    spark = (SparkSession.builder.master('local-cluster[2,1,1024]').config('spark.ui.enabled', 'false')
             .config('spark.ui.showConsoleProgress', 'false').getOrCreate())
    try:
        print('RESULT', horovod.spark.run(fn, num_proc=2), flush=True)
    finally:
        spark.stop()
''')


def test_local_cluster_two_executors():
    """Two executor JVMs on this machine: one Horovod process in each, same host hash."""
    proc = subprocess.run([sys.executable, '-c', LOCAL_CLUSTER_SCRIPT], capture_output=True, text=True,
                          timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'RESULT [(3.0, 2), (3.0, 2)]' in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_use_mpi_with_mpich(spark, tmp_path, monkeypatch):
    # MPICH's mpiexec as the mpirun on PATH: its proxies start through the same relay.
    mpich = shutil.which('mpiexec.mpich')
    if mpich is None:
        pytest.skip('MPICH is not installed')
    (tmp_path / 'mpirun').symlink_to(mpich)
    (tmp_path / 'hydra_pmi_proxy').symlink_to(os.path.join(os.path.dirname(mpich), 'hydra_pmi_proxy'))
    monkeypatch.setenv('PATH', '{}:{}'.format(tmp_path, os.environ['PATH']))
    results = horovod.spark.run(mpi_engine_counts, num_proc=2, use_mpi=True, env={'HOROVOD_CPU_OPERATIONS': 'mpi'})
    assert [(r[0], r[1], r[2]) for r in results] == [(3.0, 0, 0), (3.0, 1, 1)], results
    assert all(r[4] > 0 for r in results), results


def rank_one_fails():
    import horovod.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError('rank one gives up')
    return hvd.rank()


def test_use_mpi_failure_is_an_error_naming_mpirun(spark):
    if shutil.which('mpirun') is None:
        pytest.skip('mpirun is not installed')
    with pytest.raises(RuntimeError, match=r'mpirun exited with non-zero status') as e:
        horovod.spark.run(rank_one_fails, num_proc=2, use_mpi=True)
    assert 'rank one gives up' in str(e.value), str(e.value)


def test_exit_codes_are_printed_as_horovodrun_prints_them():
    from horovod.spark.runner import _exit_code_text
    assert _exit_code_text(1) == '1'
    assert _exit_code_text(-9) == '137 (killed by SIGKILL)'  # subprocess's -9: killed by signal 9
