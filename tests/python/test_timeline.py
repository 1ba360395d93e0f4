"""The timeline under horovodrun (every rank runs this file; rank 0 writes and checks the files).

HOROVOD_TIMELINE is set here, before init, as a launch script would: to a file with cycle marks
for the first test, then start_timeline()/stop_timeline() switch files. The summary tool reads
what was written.
"""

import json
import os
import tempfile
import time

import pytest

torch = pytest.importorskip('torch')

_DIR = tempfile.mkdtemp(prefix='hvd-timeline-test-')
_AT_INIT = os.path.join(_DIR, 'timeline.json')
os.environ['HOROVOD_TIMELINE'] = _AT_INIT
os.environ['HOROVOD_TIMELINE_MARK_CYCLES'] = '1'
_MAX_BYTES = 65536  # the smallest bound: test_head_and_rotation fills it
os.environ['HOROVOD_TIMELINE_MAX_BYTES'] = str(_MAX_BYTES)

import horovod.torch as hvd  # noqa: E402
from horovod.runner import timeline_summary  # noqa: E402

hvd.init()


def _read(path):
    with open(path) as f:
        text = f.read()
    return text, json.loads(text)  # a completed file is strict JSON


def _check_structure(events):
    """Chrome trace-event format: what chrome://tracing and Perfetto require of each event."""
    assert isinstance(events, list) and events
    rows = {}
    for e in events:
        assert isinstance(e, dict)
        assert isinstance(e['name'], str) and e['ph'] in ('M', 'X', 'i'), e
        assert isinstance(e['pid'], int), e
        if e['ph'] == 'M':
            assert isinstance(e['args'], dict), e
            if e['name'] == 'thread_name':
                rows[e['tid']] = e['args']['name']
            continue
        assert isinstance(e['tid'], int) and isinstance(e['ts'], (int, float)) and e['ts'] >= 0, e
        if e['ph'] == 'X':
            assert isinstance(e['dur'], (int, float)) and e['dur'] >= 0, e
            assert e['tid'] in rows, 'span on an unnamed row: %s' % e
        else:
            assert e['s'] in ('g', 't', 'p'), e
    return rows


def _allreduces(n, name='test_allreduce'):
    for _ in range(n):
        x = torch.ones(16) * (hvd.rank() + 1)
        y = hvd.allreduce(x, op=hvd.Sum, name=name)
        assert y[0].item() == hvd.size() * (hvd.size() + 1) / 2


def test_timeline_from_env():
    _allreduces(5)
    hvd.stop_timeline()  # completes the file
    if hvd.rank() != 0:
        assert not os.path.exists(_AT_INIT)
        return
    text, events = _read(_AT_INIT)
    assert 'allreduce.test_allreduce' in text
    assert 'start_time_since_epoch_in_micros' in text
    assert 'NEGOTIATE_ALLREDUCE' in text
    assert '"ALLREDUCE"' in text
    assert 'CYCLE_START' in text
    rows = _check_structure(events)
    assert 'allreduce.test_allreduce' in rows.values()
    names = {e['name'] for e in events}
    assert {'NEGOTIATE_ALLREDUCE', 'QUEUE', 'ALLREDUCE', 'CYCLE_START'} <= names
    # One arrival per rank in the negotiation, named after the rank.
    arrivals = {e['args']['rank'] for e in events if e['ph'] == 'i' and e.get('s') == 't'}
    assert arrivals == set(range(hvd.size()))
    spans = [e for e in events if e['name'] == 'ALLREDUCE']
    assert len(spans) >= 5
    assert all(e['args']['bytes'] == 64 and e['args']['process_set'] == 0 and e['args']['algorithm']
               for e in spans)


def test_dynamic_start_stop():
    paths = [os.path.join(_DIR, 'dynamic%d.json' % i) for i in range(3)]
    hvd.start_timeline(paths[0])
    hvd.barrier()  # start_timeline is not collective: no rank's dyn_a request before rank 0's switch
    _allreduces(3, 'dyn_a')
    hvd.start_timeline(paths[1], mark_cycles=True)  # switches files: the first is complete
    hvd.barrier()  # likewise: a fast rank's dyn_b request would reach rank 0's first file
    _allreduces(3, 'dyn_b')
    hvd.stop_timeline()
    hvd.stop_timeline()  # already stopped: only logs
    hvd.start_timeline(paths[2])
    hvd.stop_timeline()
    if hvd.rank() != 0:
        assert not any(os.path.exists(p) for p in paths)
        return
    text0, events0 = _read(paths[0])
    text1, events1 = _read(paths[1])
    _, events2 = _read(paths[2])
    _check_structure(events0)
    _check_structure(events1)
    assert 'allreduce.dyn_a' in text0 and 'allreduce.dyn_b' not in text0
    assert 'CYCLE_START' not in text0
    assert 'allreduce.dyn_b' in text1 and 'CYCLE_START' in text1
    assert not any(e['ph'] == 'X' for e in events2)


def _events_so_far(path):
    """The events of a timeline still being written: its complete lines, as a reader sees them."""
    with open(path) as f:
        text = f.read()
    events = []
    for line in text.splitlines(True)[1:]:  # the first line is '['
        if not line.endswith(',\n'):
            break  # incomplete (being written) or the closing lines
        events.append(json.loads(line[:-2]))
    return events


def test_op_shows_in_the_file_while_the_timeline_runs():
    """A reader that opens the timeline shortly after an op (as anyone tailing it does) finds the
    op's events without waiting for the timeline to stop. Polls for the content, bounded by a
    generous deadline; the time it took is printed, not asserted."""
    path = os.path.join(_DIR, 'live.json')
    hvd.start_timeline(path)
    hvd.barrier()
    x = torch.ones(16)
    hvd.allreduce(x, op=hvd.Sum, name='live')
    done = time.monotonic()
    if hvd.rank() == 0:
        seen = None
        while seen is None and time.monotonic() - done < 10:
            events = _events_so_far(path)
            rows = {e['tid'] for e in events if e['name'] == 'thread_name' and e['args']['name'] == 'allreduce.live'}
            if any(e['name'] == 'ALLREDUCE' and e['tid'] in rows for e in events):
                seen = time.monotonic() - done
            else:
                time.sleep(0.001)
        assert seen is not None, 'the allreduce never showed in the running timeline: %s' % _events_so_far(path)
        print('timeline: the op showed %.1f ms after it completed' % (seen * 1000))
    hvd.barrier()
    hvd.stop_timeline()


def test_summary_tool(tmp_path, capsys):
    path = os.path.join(_DIR, 'summary.json')
    hvd.start_timeline(path, mark_cycles=True)
    _allreduces(10, 'summary')
    hvd.stop_timeline()
    if hvd.rank() != 0:
        return
    png = str(tmp_path / 'breakdown.png')
    assert timeline_summary.main(['summary', path, '--png', png]) == 0
    out = capsys.readouterr().out
    assert 'allreduce.summary' in out
    assert 'ALLREDUCE' in out and 'QUEUE' in out
    assert 'Per step' in out
    with open(png, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    s = timeline_summary.Summary(timeline_summary.load(path))
    assert len(s.steps) >= 5
    acts = s.per_tensor['allreduce.summary']
    assert acts['ALLREDUCE'] > 0


def test_summary_reads_an_unterminated_file(tmp_path):
    if hvd.rank() != 0:
        return
    _, events = _read(_AT_INIT)
    with open(_AT_INIT) as f:
        lines = f.read().splitlines(True)
    cut = tmp_path / 'cut.json'
    # The array not closed, the last line incomplete: what a reader sees mid-run.
    cut.write_text(''.join(lines[:-4]) + lines[-4][:10])
    partial = timeline_summary.load(str(cut))
    assert 0 < len(partial) < len(events)
    assert timeline_summary.Summary(partial).per_tensor


def test_devtools_trace_engine_loads_it():
    """A real consumer, not a schema check: Chromium's DevTools trace engine (what its Performance
    panel loads a trace with) imports the file with every row and every span, on the file's clock."""
    if hvd.rank() != 0:
        return
    import devtools_trace
    _, events = _read(_AT_INIT)
    try:
        summary = devtools_trace.load_in_devtools(events)
    except devtools_trace.Unavailable as e:
        pytest.skip(str(e))
    rows = {e['tid']: e['args']['name'] for e in events if e['name'] == 'thread_name'}
    spans = {}
    for e in events:
        if e['ph'] == 'X':
            spans[e['tid']] = spans.get(e['tid'], 0) + 1
    seen = {t['tid']: t for t in summary['threads'] if t['pid'] == 0}
    assert spans and 'allreduce.test_allreduce' in [rows[tid] for tid in spans]
    for tid, n in spans.items():
        assert tid in seen, 'DevTools has no thread for row %r: %s' % (rows[tid], summary)
        assert seen[tid]['name'] == rows[tid]
        assert seen[tid]['entries'] == n, (rows[tid], seen[tid], n)
    # Its bounds are those of the spans (instant events do not widen them), on the file's clock.
    complete = [e for e in events if e['ph'] == 'X']
    assert summary['min'] == pytest.approx(min(e['ts'] for e in complete), abs=1)
    assert summary['max'] == pytest.approx(max(e['ts'] + e['dur'] for e in complete), abs=1)


def test_head_and_rotation():
    """Past its bound the timeline keeps the start of the job in <file>.head and rotates the rest
    through <file> and <file>.1; the three stay under HOROVOD_TIMELINE_MAX_BYTES together."""
    path = os.path.join(_DIR, 'bounded.json')
    hvd.start_timeline(path)
    hvd.barrier()
    _allreduces(400, 'bounded')
    hvd.stop_timeline()
    if hvd.rank() != 0:
        return
    files = [path + '.head', path + '.1', path]
    sizes = [os.path.getsize(f) for f in files]
    assert sum(sizes) <= _MAX_BYTES, sizes
    assert sizes[0] <= _MAX_BYTES // 4, sizes
    first = []
    for f in files:
        text, events = _read(f)  # each a complete trace
        _check_structure(events)
        assert 'allreduce.bounded' in text
        first.append(min(e['ts'] for e in events if e['ph'] == 'X'))
    assert first[0] < first[1] < first[2]  # one clock: head, then the previous, then the live one
    head = _read(files[0])[1]
    assert any(e['name'] == 'NEGOTIATE_ALLREDUCE' for e in head)  # the warm-up is kept
