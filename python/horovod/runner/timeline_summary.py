"""``horovod-timeline``: reads a Horovod timeline (Chrome trace-event JSON written by rank 0 with
HOROVOD_TIMELINE) and tells where the time went.

    horovod-timeline summary FILE [--png OUT.png] [--top N]

Prints, per tensor (row), the total time in each activity (NEGOTIATE_*, QUEUE,
MEMCPY_IN_FUSION_BUFFER, the collective, MEMCPY_OUT_FUSION_BUFFER) and its share of that tensor's
total; then, when the file has CYCLE_START marks (HOROVOD_TIMELINE_MARK_CYCLES=1), per engine
step (from one mark to the next) the wall-clock time during which each activity was running on
some tensor, as a share of the step. With --png, draws both as stacked bars.

The file may still be being written: complete lines are read and the array is closed.
"""

import argparse
import collections
import json
import sys

# Activities in the order they happen to a tensor; collectives (ALLREDUCE, ...) go in between.
_BEFORE = ['NEGOTIATE', 'QUEUE', 'MEMCPY_IN_FUSION_BUFFER']
_AFTER = ['MEMCPY_OUT_FUSION_BUFFER']


def load(path):
    """The trace's events. Accepts a complete file or one still being written (an unterminated
    array with a trailing comma, possibly an incomplete last line)."""
    with open(path, 'r', encoding='utf-8', errors='replace') as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        pass
    end = text.rfind('\n')
    text = text[:end + 1].rstrip() if end >= 0 else ''
    if not text.endswith(']'):
        text = text.rstrip(',') + '\n]'
    return json.loads(text)


def _activity_order(name):
    for i, prefix in enumerate(_BEFORE):
        if name.startswith(prefix):
            return (i, name)
    if name in _AFTER:
        return (len(_BEFORE) + 1, name)
    return (len(_BEFORE), name)  # the collective


def _union_length(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


class Summary(object):
    """Totals of one trace: per tensor and activity (microseconds), and per step."""

    def __init__(self, events):
        self.rows = {}
        spans = []
        self.cycles = []
        self.dropped = 0
        for e in events:
            ph, name = e.get('ph'), e.get('name')
            if ph == 'M' and name == 'thread_name':
                self.rows[e.get('tid')] = e.get('args', {}).get('name', '')
            elif ph == 'X':
                spans.append((e.get('tid'), name, float(e.get('ts', 0)), float(e.get('dur', 0))))
            elif ph == 'i' and name == 'CYCLE_START':
                self.cycles.append(float(e.get('ts', 0)))
            elif name == 'TIMELINE_DROPPED':
                self.dropped = max(self.dropped, e.get('args', {}).get('dropped_events', 0))
        self.cycles.sort()
        self.spans = spans
        self.per_tensor = collections.defaultdict(lambda: collections.defaultdict(float))
        for tid, name, _, dur in spans:
            self.per_tensor[self.rows.get(tid, 'tid %s' % tid)][name] += dur
        self.activities = sorted({name for _, name, _, _ in spans}, key=_activity_order)
        self.steps = self._steps()

    def _steps(self):
        """[(start, duration, {activity: busy time})] between consecutive CYCLE_START marks; a
        span counts in the step where it starts, clipped to the step's end."""
        if len(self.cycles) < 2:
            return []
        import bisect
        bounds = self.cycles
        per_step = [collections.defaultdict(list) for _ in range(len(bounds) - 1)]
        for _, name, ts, dur in self.spans:
            i = bisect.bisect_right(bounds, ts) - 1
            if 0 <= i < len(per_step):
                per_step[i][name].append((ts, min(ts + dur, bounds[i + 1])))
        steps = []
        for i, acts in enumerate(per_step):
            busy = {name: _union_length(iv) for name, iv in acts.items()}
            steps.append((bounds[i], bounds[i + 1] - bounds[i], busy))
        return steps

    def format(self, top=20):
        out = []
        ranked = sorted(self.per_tensor.items(), key=lambda kv: -sum(kv[1].values()))
        out.append('Per tensor (total time in each activity, ms, and share of the tensor\'s time); '
                   '%d tensors, %d shown' % (len(ranked), min(top, len(ranked))))
        width = max([len(n) for n, _ in ranked[:top]] + [6])
        out.append('%-*s %10s  %s' % (width, 'tensor', 'total ms', '  '.join(self.activities)))
        for name, acts in ranked[:top]:
            total = sum(acts.values())
            cells = []
            for a in self.activities:
                v = acts.get(a, 0.0)
                cells.append('%s %.3f (%.0f%%)' % (a, v / 1000.0, 100.0 * v / total if total else 0.0))
            out.append('%-*s %10.3f  %s' % (width, name, total / 1000.0, ', '.join(cells)))
        if self.steps:
            out.append('')
            out.append('Per step (CYCLE_START to the next): wall time while each activity ran on some '
                       'tensor, ms and share of the step; %d steps' % len(self.steps))
            durations = [d for _, d, _ in self.steps]
            mean = sum(durations) / len(durations)
            out.append('step duration: mean %.3f ms, min %.3f ms, max %.3f ms'
                       % (mean / 1000.0, min(durations) / 1000.0, max(durations) / 1000.0))
            for a in self.activities:
                busy = sum(b.get(a, 0.0) for _, _, b in self.steps)
                out.append('  %-28s %10.3f ms total  %5.1f%% of step time'
                           % (a, busy / 1000.0, 100.0 * busy / sum(durations) if sum(durations) else 0.0))
            shown = self.steps[:top]
            out.append('first %d steps:' % len(shown))
            for i, (start, dur, busy) in enumerate(shown):
                parts = ', '.join('%s %.0f%%' % (a, 100.0 * busy.get(a, 0.0) / dur if dur else 0.0)
                                  for a in self.activities if busy.get(a))
                out.append('  step %d at %.3f ms: %.3f ms  %s' % (i, start / 1000.0, dur / 1000.0, parts))
        else:
            out.append('')
            out.append('No per-step figures: the trace has fewer than two CYCLE_START marks '
                       '(set HOROVOD_TIMELINE_MARK_CYCLES=1).')
        if self.dropped:
            out.append('')
            out.append('Note: the writer dropped %d events (it fell behind).' % self.dropped)
        return '\n'.join(out)

    def plot(self, path, top=20):
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt

        colors = {a: plt.cm.tab10(i % 10) for i, a in enumerate(self.activities)}
        n_plots = 2 if self.steps else 1
        fig, axes = plt.subplots(n_plots, 1, figsize=(11, 4.5 * n_plots), squeeze=False)
        if self.steps:
            ax = axes[0][0]
            shown = self.steps[:max(top, 50)]
            x = list(range(len(shown)))
            bottom = [0.0] * len(shown)
            for a in self.activities:
                vals = [100.0 * b.get(a, 0.0) / d if d else 0.0 for _, d, b in shown]
                ax.bar(x, vals, bottom=bottom, color=colors[a], label=a)
                bottom = [u + v for u, v in zip(bottom, vals)]
            ax.set_xlabel('step (CYCLE_START to the next)')
            ax.set_ylabel('% of the step (activities may overlap)')
            ax.set_title('Where each step\'s time went')
            ax.legend(fontsize=8, loc='upper right')
        ax = axes[n_plots - 1][0]
        ranked = sorted(self.per_tensor.items(), key=lambda kv: -sum(kv[1].values()))[:top]
        names = [n for n, _ in ranked][::-1]
        left = [0.0] * len(names)
        for a in self.activities:
            vals = [dict(ranked)[n].get(a, 0.0) / 1000.0 for n in names]
            ax.barh(names, vals, left=left, color=colors[a], label=a)
            left = [u + v for u, v in zip(left, vals)]
        ax.set_xlabel('total ms')
        ax.set_title('Time per tensor by activity (top %d)' % len(names))
        ax.tick_params(axis='y', labelsize=7)
        if not self.steps:
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='horovod-timeline', description='Reads a Horovod timeline.')
    sub = parser.add_subparsers(dest='command')
    summary = sub.add_parser('summary', help='per-activity totals per tensor and per step')
    summary.add_argument('file', help='the timeline (HOROVOD_TIMELINE file)')
    summary.add_argument('--png', help='also draw the breakdown into this PNG file')
    summary.add_argument('--top', type=int, default=20, help='tensors and steps listed (default 20)')
    args = parser.parse_args(argv)
    if args.command != 'summary':
        parser.print_help()
        return 2
    try:
        s = Summary(load(args.file))
    except (OSError, ValueError) as e:
        print('horovod-timeline: cannot read %s: %s' % (args.file, e), file=sys.stderr)
        return 1
    print(s.format(top=args.top))
    if args.png:
        s.plot(args.png, top=args.top)
        print('\nwrote %s' % args.png)
    return 0


if __name__ == '__main__':
    sys.exit(main())
