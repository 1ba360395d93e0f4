"""Horovod under a real Slurm (the private clusters of conftest.py): the environment srun gives
each task, training under `srun`, an `sbatch` job (deploy/slurm/train.sbatch) and `salloc` +
`horovodrun` on one node; the environment, an allreduce and the sbatch recipe across two nodes
(network namespaces with their own host names). Every command is bounded by a timeout."""

import json
import os
import shutil
import socket

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK_ENV = os.path.join(ROOT, 'tests', 'slurm', 'task_env.py')
MNIST = os.path.join(ROOT, 'examples', 'pytorch', 'pytorch_mnist.py')
SBATCH_RECIPE = os.path.join(ROOT, 'deploy', 'slurm', 'train.sbatch')
TRAIN_TIMEOUT = 300

# Prints the place in the job as the engine computed it, and the result of one allreduce.
HVD_PROBE = ('import horovod.torch as hvd, torch; hvd.init(); '
             's = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item(); '
             'print("probe rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d sum=%g" '
             '% (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), s), '
             'flush=True)')


def probe_lines(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return sorted(line for line in result.stdout.splitlines() if line.startswith('probe'))


def task_envs(slurm, srun_options, directory):
    """Runs task_env.py under `srun OPTIONS`; the tasks' records in rank order."""
    result = slurm.run(['srun'] + srun_options + ['python3', TASK_ENV, directory], timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    names = sorted(os.listdir(directory), key=lambda name: int(name[len('task-'):-len('.json')]))
    tasks = []
    for name in names:
        with open(os.path.join(directory, name)) as record:
            tasks.append(json.load(record))
    return tasks


def test_srun_sets_rank_size_and_local_rank(slurm, tmp_path):
    tasks = task_envs(slurm, ['-n', 2], tmp_path)
    assert len(tasks) == 2
    for rank, task in enumerate(tasks):
        env = task['env']
        assert env['SLURM_PROCID'] == str(rank)
        assert env['SLURM_LOCALID'] == str(rank)      # one node: local rank == rank
        assert env['SLURM_NTASKS'] == '2'
        assert env['SLURM_STEP_NUM_TASKS'] == '2'
        assert env['SLURM_NNODES'] == '1' and env['SLURM_NODEID'] == '0'
        assert env['SLURM_STEP_NODELIST'] == socket.gethostname().split('.')[0]
        assert 'PMI_RANK' not in env                 # MpiDefault=none: no PMI server
    assert tasks[0]['env']['SLURM_JOB_ID'] == tasks[1]['env']['SLURM_JOB_ID']


@pytest.mark.parametrize('plugin,rank_var,extra_var', [('pmi2', 'PMI_RANK', 'PMI_SIZE'),
                                                        ('pmix', 'PMIX_RANK', 'PMIX_NAMESPACE')])
def test_srun_mpi_plugins_set_pmi_variables(slurm, tmp_path, plugin, rank_var, extra_var):
    tasks = task_envs(slurm, ['--mpi=' + plugin, '-n', 2], tmp_path)
    assert [task['env'][rank_var] for task in tasks] == ['0', '1']
    assert all(extra_var in task['env'] for task in tasks)
    if plugin == 'pmi2':
        assert all(task['env']['PMI_SIZE'] == '2' for task in tasks)


def test_srun_horovod_with_rendezvous_dir(slurm, tmp_path):
    """Ranks from SLURM_*, rendezvous through a shared directory: works without horovodrun."""
    result = slurm.run(['srun', '-n', 2, 'python3', '-c', HVD_PROBE], timeout=TRAIN_TIMEOUT,
                       extra_env={'HOROVOD_RENDEZVOUS_DIR': str(tmp_path)})
    assert probe_lines(result) == ['probe rank=0 size=2 local_rank=0 local_size=2 cross_rank=0 cross_size=1 sum=3',
                                   'probe rank=1 size=2 local_rank=1 local_size=2 cross_rank=0 cross_size=1 sum=3']


def test_srun_trains_the_pytorch_example(slurm, tmp_path):
    result = slurm.run(['srun', '-n', 2, 'python3', MNIST, '--epochs', 1], timeout=TRAIN_TIMEOUT,
                       extra_env={'HOROVOD_RENDEZVOUS_DIR': str(tmp_path), 'OMP_NUM_THREADS': '1'})
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Final test accuracy' in result.stdout and '(2 workers, global batch 64)' in result.stdout


# Plain `srun python train.py`, no HOROVOD_RENDEZVOUS_DIR: the engine rendezvouses by itself
# under Slurm (a store served by the first task of the step's first node; docs/mpi.md).
def test_plain_srun_trains_the_pytorch_example(slurm):
    result = slurm.run(['srun', '-n', 2, 'python3', MNIST, '--epochs', 1], timeout=TRAIN_TIMEOUT,
                       extra_env={'OMP_NUM_THREADS': '1'})
    assert result.returncode == 0, result.stdout + result.stderr
    assert '(2 workers, global batch 64)' in result.stdout


def test_sbatch_recipe_trains_the_example(slurm, tmp_path):
    """deploy/slurm/train.sbatch, submitted from tmp_path (the job's shared submit directory)."""
    output = tmp_path / 'job.out'
    result = slurm.run(['sbatch', '--wait', '--ntasks=2', '--output=' + str(output), SBATCH_RECIPE,
                        '--epochs', 1], timeout=TRAIN_TIMEOUT, cwd=tmp_path, extra_env={'TRAIN_SCRIPT': MNIST})
    log = output.read_text() if output.exists() else '(no job output)'
    assert result.returncode == 0, result.stdout + result.stderr + log
    assert 'Submitted batch job' in result.stdout
    assert '2 tasks on' in log
    assert 'Final test accuracy' in log and '(2 workers, global batch 64)' in log
    # The recipe made its rendezvous directory in the submit directory and removed it at the end.
    assert os.listdir(tmp_path / '.horovod-rendezvous') == []


def test_salloc_then_horovodrun(slurm):
    """An interactive allocation, and horovodrun inside it on the allocated node."""
    horovodrun = shutil.which('horovodrun')
    if horovodrun is None:
        pytest.skip('horovodrun is not on PATH')
    node = socket.gethostname().split('.')[0]
    result = slurm.run(['salloc', '-n', 2, horovodrun, '-np', 2, '-H', node + ':2',
                        'python3', '-c', HVD_PROBE], timeout=TRAIN_TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Granted job allocation' in result.stderr
    assert result.stdout.count('size=2 local_rank=') == 2 and 'sum=3' in result.stdout


# ---------------------------------------------------------------------------- two nodes

def test_srun_two_nodes_environment(slurm2, tmp_path):
    tasks = task_envs(slurm2, ['-N', 2, '-n', 4], tmp_path)
    assert [task['host'] for task in tasks] == ['node1', 'node1', 'node2', 'node2']
    assert [task['env']['SLURM_NODEID'] for task in tasks] == ['0', '0', '1', '1']
    assert [task['env']['SLURM_LOCALID'] for task in tasks] == ['0', '1', '0', '1']
    assert all(task['env']['SLURM_NTASKS'] == '4' and task['env']['SLURM_NNODES'] == '2' for task in tasks)
    assert all(task['env']['SLURM_STEP_NODELIST'] == 'node[1-2]' for task in tasks)


def test_srun_horovod_across_two_nodes(slurm2, tmp_path):
    """Local and cross ranks from the host names, an allreduce between the nodes over TCP."""
    result = slurm2.run(['srun', '-N', 2, '-n', 4, 'python3', '-c', HVD_PROBE], timeout=TRAIN_TIMEOUT,
                        extra_env={'HOROVOD_RENDEZVOUS_DIR': str(tmp_path)})
    assert probe_lines(result) == [
        'probe rank={} size=4 local_rank={} local_size=2 cross_rank={} cross_size=2 sum=10'.format(r, r % 2, r // 2)
        for r in range(4)]


def test_sbatch_recipe_on_two_nodes(slurm2, tmp_path):
    output = tmp_path / 'job.out'
    result = slurm2.run(['sbatch', '--wait', '--nodes=2', '--ntasks=4', '--output=' + str(output), SBATCH_RECIPE,
                         '--epochs', 1], timeout=TRAIN_TIMEOUT, cwd=tmp_path, extra_env={'TRAIN_SCRIPT': MNIST})
    log = output.read_text() if output.exists() else '(no job output)'
    assert result.returncode == 0, result.stdout + result.stderr + log
    assert '4 tasks on node[1-2]' in log
    assert '(4 workers, global batch 128)' in log


def test_salloc_host_list_for_horovodrun(slurm2):
    """The -H list docs/schedulers.md builds inside an allocation, from SLURM_JOB_NODELIST."""
    result = slurm2.run(['salloc', '-N', 2, '-n', 4, 'bash', '-c',
                         'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/$/:2/" | paste -sd,'], timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == 'node1:2,node2:2'
