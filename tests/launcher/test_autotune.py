"""Autotuning under horovodrun: a small torch training job with --autotune and a log file. The
CSV has the documented columns, one row per warmup and scored sample and one final row naming a
sampled setting; the job trains to the same loss as without autotune (with two ranks a sum is
the same whatever algorithm or fusion ran it). Needs horovod.torch importable by this Python
(run from the venv the package is installed in)."""

import csv
import subprocess
import sys

import pytest

PYTHON = sys.executable

COLUMNS = ['sample', 'phase', 'fusion_threshold_bytes', 'burst_quiet_us', 'caller_progress_us', 'caller_spin_us',
           'allreduce_crossover_bytes', 'cache_enabled', 'hierarchical', 'score_bytes_per_sec']
KNOBS = COLUMNS[2:-1]

TRAIN = '''
import torch
import horovod.torch as hvd
hvd.init()
torch.set_num_threads(1)
torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 1))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named_parameters=model.named_parameters())
g = torch.Generator().manual_seed(100 + hvd.rank())
w = torch.linspace(-1, 1, 32)
first = None
for step in range(300):
    x = torch.randn(64, 32, generator=g)
    y = (x @ w).unsqueeze(1)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    first = loss.item() if first is None else first
avg = hvd.allreduce(loss.detach(), name='final_loss').item()
digest = hvd.allgather(torch.tensor([sum(p.sum().item() for p in model.parameters())]), name='digest')
assert torch.all(digest == digest[0]), digest  # every rank holds the same model
print('rank {} first {:.6f} last {:.9f}'.format(hvd.rank(), first, avg), flush=True)
'''


@pytest.fixture(scope='module')
def torch_adapter():
    probe = subprocess.run([PYTHON, '-c', 'import horovod.torch'], capture_output=True)
    if probe.returncode != 0:
        pytest.skip('horovod.torch is not importable by {}'.format(PYTHON))


def _losses(stdout):
    line = [text for text in stdout.splitlines() if 'rank 0 first' in text]
    assert line, stdout
    parts = line[0].split()
    return float(parts[-3]), float(parts[-1])


def test_autotune_logs_every_sample_and_training_converges_as_without(run, torch_adapter, tmp_path):
    log = tmp_path / 'autotune.csv'
    tuned = run('--autotune', '--autotune-log-file', log, '--autotune-warmup-samples', 2,
                '--autotune-steps-per-sample', 5, '--autotune-bayes-opt-max-samples', 8, '-np', 2,
                PYTHON, '-c', TRAIN, timeout=180)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    plain = run('-np', 2, PYTHON, '-c', TRAIN, timeout=180)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert 'no effect' not in tuned.stderr, tuned.stderr

    with open(log) as f:
        rows = list(csv.reader(f))
    assert rows[0] == COLUMNS
    body = [dict(zip(COLUMNS, r)) for r in rows[1:]]
    phases = [r['phase'] for r in body]
    assert phases == ['warmup'] * 2 + ['sample'] * 8 + ['final'], phases
    assert [int(r['sample']) for r in body if r['phase'] == 'sample'] == list(range(8))
    for r in body:
        assert float(r['score_bytes_per_sec']) > 0, r
        assert r['cache_enabled'] in ('0', '1') and r['hierarchical'] in ('0', '1'), r
        assert int(r['fusion_threshold_bytes']) > 0, r
    samples = [r for r in body if r['phase'] == 'sample']
    final = body[-1]
    # The choice is one of the measured settings, named by its sample index.
    chosen = samples[int(final['sample'])]
    assert [final[k] for k in KNOBS] == [chosen[k] for k in KNOBS]
    assert final['score_bytes_per_sec'] == chosen['score_bytes_per_sec']
    # It searched: more than one setting was measured.
    assert len({tuple(r[k] for k in KNOBS) for r in samples}) > 1

    first, last = _losses(tuned.stdout)
    plain_first, plain_last = _losses(plain.stdout)
    assert last < 0.2 * first, (first, last)
    assert first == pytest.approx(plain_first, rel=1e-6)
    assert last == pytest.approx(plain_last, rel=1e-4, abs=1e-7), (last, plain_last)


def test_pinned_knobs_stay_as_set(run, torch_adapter, tmp_path):
    log = tmp_path / 'pinned.csv'
    r = run('--autotune', '--autotune-log-file', log, '--autotune-warmup-samples', 0,
            '--autotune-steps-per-sample', 3, '--autotune-bayes-opt-max-samples', 4, '--fusion-threshold-mb', 2,
            '--cache-capacity', 512, '-np', 2, PYTHON, '-c', TRAIN, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(log) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5
    assert {row['fusion_threshold_bytes'] for row in rows} == {str(2 * 1024 * 1024)}
    assert {row['cache_enabled'] for row in rows} == {'1'}
