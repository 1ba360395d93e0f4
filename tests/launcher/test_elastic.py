"""Elastic jobs under horovodrun: Horovod's elastic scenarios, each a real job of torch workers
(tests/launcher/elastic/train.py) on several "hosts" of this machine (localhost, 127.0.0.1,
127.0.0.2: distinct host names to the driver and the engine). Every scenario checks, per epoch,
the round, size and ranks the training script saw, and the launcher's exit status and message.
"""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, 'elastic', 'train.py')

pytest.importorskip('torch')
pytest.importorskip('horovod.torch')


def run_elastic(run, tmp_path, hosts, *args, schedule=(), epochs=6, timeout=150, discovery=True, extra_env=None,
                discovery_delay=0):
    log = tmp_path / 'log.jsonl'
    hostsfile = tmp_path / 'hosts'
    hostsfile.write_text('\n'.join(hosts.split()) + '\n')
    env = {'ELASTIC_LOG': str(log), 'ELASTIC_HOSTS': str(hostsfile), 'ELASTIC_EPOCHS': str(epochs),
           'ELASTIC_SCHEDULE': json.dumps(list(schedule)), 'HOROVOD_ELASTIC_DISCOVERY_INTERVAL': '0.2',
           'PYTHONUNBUFFERED': '1'}
    env.update(extra_env or {})
    if discovery:
        script = tmp_path / 'discover.sh'
        # discovery_delay: a slow script (the launcher runs it between its other duties).
        script.write_text('#!/bin/sh\n{}cat {}\n'.format(
            'sleep {}\n'.format(discovery_delay) if discovery_delay else '', hostsfile))
        script.chmod(0o755)
        args = args + ('--host-discovery-script', str(script))
    r = run(*args, sys.executable, '-W', 'ignore', TRAIN, timeout=timeout, extra_env=env)
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r, records


def epochs(records):
    """{epoch: (round, size, ranks, hosts)} as seen by the last round that logged the epoch (epochs
    that completed in a round were logged by all of its ranks: checked by full_epochs)."""
    out = {}
    for rec in records:
        e = rec['epoch']
        if e not in out or rec['round'] > out[e][0]:
            out[e] = (rec['round'], rec['size'], [], [])
    for rec in records:
        round_, size, ranks, hosts = out[rec['epoch']]
        if rec['round'] == round_:
            ranks.append(rec['rank'])
            hosts.append(rec['host'])
    for e, (round_, size, ranks, hosts) in out.items():
        # A rank that failed in an epoch did not log it; the others did, each once.
        assert len(set(ranks)) == len(ranks) and set(ranks) <= set(range(size)), (e, out[e])
        out[e] = (round_, size, sorted(ranks), sorted(set(hosts)))
    return out


def full_epochs(records, failed_epochs):
    for e, (round_, size, ranks, hosts) in epochs(records).items():
        if e not in failed_epochs:
            assert ranks == list(range(size)), (e, round_, size, ranks)


def rounds_and_sizes(records):
    view = epochs(records)
    return [(e, view[e][0], view[e][1]) for e in sorted(view)]


def state_continues(records):
    """Every epoch's weights agree across the ranks of its round (synced after every reset)."""
    by_key = {}
    for rec in records:
        by_key.setdefault((rec['epoch'], rec['round']), set()).add(rec['weights'])
    return all(len(v) == 1 for v in by_key.values())


def test_rank_failing_by_exception_blacklists_its_host(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:2 127.0.0.1:2', '-np', '4', '--min-np', '2',
                             schedule=[{'epoch': 1, 'rank': 3, 'do': 'raise'}])
    assert r.returncode == 0, r.stderr
    assert rounds_and_sizes(records) == [(0, 0, 4), (1, 0, 4), (2, 1, 2), (3, 1, 2), (4, 1, 2), (5, 1, 2)]
    assert epochs(records)[5][3] == ['localhost']
    assert 'blacklisting host 127.0.0.1' in r.stderr
    assert 'injected failure at epoch 1' in r.stdout + r.stderr
    # The removed worker on the blacklisted host leaves quietly (status 0, one line, no traceback).
    assert '127.0.0.1[0] has been removed from elastic job: this worker exits' in r.stdout + r.stderr
    assert 'HorovodRemovedError' not in r.stdout + r.stderr
    assert state_continues(records)


@pytest.mark.parametrize('discovery_delay', [0, 0.5], ids=['fast-discovery', 'slow-discovery'])
def test_rank_killed_by_sigkill(run, tmp_path, discovery_delay):
    # With a slow discovery script the kill mostly lands while the launcher runs the script, and
    # the survivors report the rank lost before the launcher reaps it: the report must still say
    # how the worker ended, not that it "did not rejoin" (the launcher then killed nothing).
    r, records = run_elastic(run, tmp_path, 'localhost:2 127.0.0.1:2', '-np', '4', '--min-np', '2',
                             schedule=[{'epoch': 2, 'rank': 2, 'do': 'kill'}], discovery_delay=discovery_delay)
    assert r.returncode == 0, r.stderr
    assert rounds_and_sizes(records) == [(0, 0, 4), (1, 0, 4), (2, 0, 4), (3, 1, 2), (4, 1, 2), (5, 1, 2)]
    # Rank 2 is 127.0.0.1[0]: reported by how it ended, never as a straggler the launcher killed.
    assert 'worker 127.0.0.1[0] (rank 2 of round 0) ended with signal 9 (SIGKILL)' in r.stderr, r.stderr
    assert 'worker 127.0.0.1[0] was reported lost' not in r.stderr, r.stderr
    assert state_continues(records)


def test_fault_tolerance_without_discovery(run, tmp_path):
    # -H with --min-np: fixed hosts, survives a failure without scaling up again.
    r, records = run_elastic(run, tmp_path, '', '-np', '4', '--min-np', '2', '-H', 'localhost:2,127.0.0.1:2',
                             schedule=[{'epoch': 1, 'rank': 0, 'do': 'exit'}], discovery=False)
    assert r.returncode == 0, r.stderr
    view = epochs(records)
    assert [view[e][1] for e in range(6)] == [4, 4, 2, 2, 2, 2]
    # localhost failed: the survivors are on 127.0.0.1, and rank 0 moved there with the state.
    assert view[5][3] == ['127.0.0.1']
    assert state_continues(records)


def test_hosts_added_then_removed(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:2', '-np', '2', '--min-np', '2', epochs=7,
                             schedule=[{'epoch': 1, 'rank': 0, 'do': 'hosts', 'hosts': 'localhost:2 127.0.0.1:2'},
                                       {'epoch': 4, 'rank': 0, 'do': 'hosts', 'hosts': '127.0.0.1:2'}])
    assert r.returncode == 0, r.stderr
    assert rounds_and_sizes(records) == [(0, 0, 2), (1, 0, 2), (2, 1, 4), (3, 1, 4), (4, 1, 4), (5, 2, 2),
                                         (6, 2, 2)]
    view = epochs(records)
    assert view[3][3] == ['127.0.0.1', 'localhost'] and view[6][3] == ['127.0.0.1']
    assert 'hosts added' in r.stderr and 'hosts removed' in r.stderr
    assert state_continues(records)


def test_max_np_caps_the_workers(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:2', '-np', '2', '--min-np', '2', '--max-np', '3', epochs=4,
                             schedule=[{'epoch': 1, 'rank': 0, 'do': 'hosts', 'hosts': 'localhost:2 127.0.0.1:2'}])
    assert r.returncode == 0, r.stderr
    assert [s for _, _, s in rounds_and_sizes(records)] == [2, 2, 3, 3]


def test_all_ranks_failing_ends_the_job(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:1 127.0.0.1:1', '-np', '2', '--min-np', '1',
                             schedule=[{'epoch': 1, 'rank': 0, 'do': 'raise'}, {'epoch': 1, 'rank': 1, 'do': 'raise'}])
    assert r.returncode == 1
    assert 'every worker of round 0 failed and every host is blacklisted' in r.stderr, r.stderr


def test_all_hosts_blacklisted_one_by_one(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:1 127.0.0.1:1', '-np', '2', '--min-np', '1',
                             schedule=[{'epoch': 1, 'rank': 1, 'do': 'exit'}, {'epoch': 3, 'rank': 0, 'do': 'exit'}])
    assert r.returncode == 1
    assert [s for _, _, s in rounds_and_sizes(records)] == [2, 2, 1]  # rank 0 failed in epoch 3
    assert 'every host is blacklisted' in r.stderr, r.stderr


def test_min_np_timeout(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:2 127.0.0.1:2', '-np', '4', '--min-np', '3',
                             '--elastic-timeout', '3', schedule=[{'epoch': 1, 'rank': 3, 'do': 'kill'}])
    assert r.returncode == 1
    assert 'Timed out after 3.0 s waiting for 3 slots (2 available' in r.stderr, r.stderr
    assert [s for _, _, s in rounds_and_sizes(records)] == [4, 4]


def test_reset_limit(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:1 127.0.0.1:1 127.0.0.2:1', '-np', '3', '--min-np', '1',
                             '--reset-limit', '1',
                             schedule=[{'epoch': 1, 'rank': 2, 'do': 'raise'}, {'epoch': 3, 'rank': 1, 'do': 'raise'}])
    assert r.returncode == 1
    assert [s for _, _, s in rounds_and_sizes(records)] == [3, 3, 2, 2]
    assert ('Horovod was shutdown because number of resets during elastic job exceeded limit: 1'
            in r.stderr), r.stderr


def test_blacklisted_host_returns_after_cooldown(run, tmp_path):
    r, records = run_elastic(run, tmp_path, 'localhost:2 127.0.0.1:2', '-np', '4', '--min-np', '2',
                             '--blacklist-cooldown-range', '1', '2', epochs=12,
                             schedule=[{'epoch': 1, 'rank': 3, 'do': 'raise'}],
                             extra_env={'ELASTIC_SLEEP': '0.5'})
    assert r.returncode == 0, r.stderr
    sizes = [s for _, _, s in rounds_and_sizes(records)]
    assert sizes[:2] == [4, 4] and 2 in sizes and sizes[-1] == 4, sizes
    assert 'blacklisting host 127.0.0.1 (a worker failed there) for ' in r.stderr
    assert 'hosts added' in r.stderr
    assert state_continues(records)


def test_stopped_rank_is_killed_once_reported(run, tmp_path):
    # A paused rank: the liveness watch names it (HOROVOD_LIVENESS_TIMEOUT_SECONDS), the others
    # re-join reporting whom they lost, and the driver kills the paused one at once (not after
    # the 60 s gather timeout given here).
    r, records = run_elastic(run, tmp_path, 'localhost:2 127.0.0.1:2', '-np', '4', '--min-np', '2',
                             schedule=[{'epoch': 1, 'rank': 3, 'do': 'stop'}],
                             extra_env={'HOROVOD_ELASTIC_GATHER_TIMEOUT': '60'})
    assert r.returncode == 0, r.stderr
    assert [s for _, _, s in rounds_and_sizes(records)] == [4, 4, 2, 2, 2, 2]
    assert 'Horovod lost rank 3 (host 127.0.0.1): it stopped responding' in r.stderr, r.stderr
    assert 'was reported lost by the others and did not rejoin; killing it' in r.stderr, r.stderr
    assert state_continues(records)


def test_stalled_round_becomes_a_reset(run, tmp_path):
    # A rank that is alive but never submits what the others wait for (here: it sleeps in the
    # middle of the epoch): the stall shutdown fails the round, and the job goes on.
    r, records = run_elastic(run, tmp_path, 'localhost:2 127.0.0.1:2', '-np', '4', '--min-np', '2',
                             schedule=[{'epoch': 1, 'rank': 3, 'do': 'hang'}],
                             extra_env={'HOROVOD_STALL_CHECK_TIME_SECONDS': '1',
                                        'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS': '2',
                                        'HOROVOD_ELASTIC_GATHER_TIMEOUT': '2'})
    assert r.returncode == 0, r.stderr
    assert [s for _, _, s in rounds_and_sizes(records)] == [4, 4, 2, 2, 2, 2]
    assert 'HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2' in r.stderr, r.stderr
    assert state_continues(records)


def test_first_discovery_failure_fails_the_job(run, tmp_path):
    script = tmp_path / 'discover.sh'
    script.write_text('#!/bin/sh\nexit 7\n')
    script.chmod(0o755)
    r = run('-np', '2', '--host-discovery-script', str(script), 'true')
    assert r.returncode == 1
    assert 'Failed to execute discovery script: {}. Exit code: 7'.format(script) in r.stderr, r.stderr


def test_keras_fit_survives_a_failed_worker(run, tmp_path):
    # model.fit inside hvd.elastic.run: the failed collective surfaces from the compiled train
    # step as tf.errors.UnknownError; run() treats it as a HorovodInternalError and resumes.
    pytest.importorskip('tensorflow')
    log = tmp_path / 'log.jsonl'
    hosts = tmp_path / 'hosts'
    hosts.write_text('localhost:1\n127.0.0.1:1\n127.0.0.2:1\n')
    r = run('-np', '3', '--min-np', '2', '--host-discovery-script', 'cat {}'.format(hosts), sys.executable, '-W',
            'ignore', os.path.join(HERE, 'elastic', 'train_keras.py'), timeout=240,
            extra_env={'ELASTIC_LOG': str(log), 'ELASTIC_FAIL_AT': '1:2', 'ELASTIC_EPOCHS': '4'})
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert rounds_and_sizes(records) == [(0, 0, 3), (1, 1, 2), (2, 1, 2), (3, 1, 2)]
    assert state_continues(records)
    assert 'done: rank 0 of 2' in r.stdout


def test_horovod_run_elastic_returns_results_by_final_rank(hvdrun):
    import horovod

    def fn():
        import horovod.torch as hvd
        hvd.init()
        return hvd.rank(), hvd.size()

    os.environ['HOROVOD_RUN_BINARY'] = hvdrun
    try:
        results = horovod.run(fn, num_proc=2, min_num_proc=2, hosts='localhost:1,127.0.0.1:1')
    finally:
        del os.environ['HOROVOD_RUN_BINARY']
    assert results == [(0, 2), (1, 2)]
