"""The real core under horovodrun: init through the launcher's rendezvous and one allreduce
(horovodrun_allreduce_check, built next to horovodrun when the C++ library is built)."""

import time

import pytest



@pytest.mark.parametrize('np', [1, 2, 3, 4])
def test_allreduce(run, check_program, np):
    r = run('-np', np, check_program, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    expected = np * (np + 1) // 2
    lines = sorted(r.stdout.splitlines())
    assert len(lines) == np
    for rank, line in enumerate(lines):
        assert line.startswith('[{0}]<stdout>:allreduce ok rank={0} size={1} local_rank={0} sum={2} '.format(
            rank, np, expected)), line


def test_allreduce_two_local_hosts(run, check_program):
    r = run('-np', 4, '-H', 'localhost:2,127.0.0.1:2', check_program, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(' sum=10 ') == 4


def test_rank_failing_after_init(run, check_program):
    start = time.monotonic()
    r = run('-np', 3, check_program, '--fail-rank', 1, timeout=120)
    assert r.returncode == 1
    assert '[1]<stderr>:rank 1 failing on purpose' in r.stderr
    assert 'Process 1 exit with status code 3.' in r.stdout or 'exit with status code 1.' in r.stdout
    assert 'Horovod detected that one or more processes exited with non-zero status' in r.stderr
    assert time.monotonic() - start < 30


def test_cycle_time_is_named_once_as_having_no_effect(run, check_program):
    # The engine has no cycle: --cycle-time-ms reaches the ranks, and rank 0 alone says so.
    r = run('-np', 2, '--cycle-time-ms', 5, check_program, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(' sum=3 ') == 2
    output = r.stdout + r.stderr
    assert output.count('HOROVOD_CYCLE_TIME is set but has no effect') == 1, output
    assert 'HOROVOD_BURST_QUIET_US' in output
