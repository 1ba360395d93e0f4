"""One rank of a fault-gate run (bench/fault_gate.py starts it under horovodrun).

Loops allreduces until told to stop or until it fails, and writes what happened to
<GATE_DIR>/rank<R>.json: {"event": "error", "type", "err_rank", "message", "t"} with the wall
time the error reached Python, or {"event": "done", "steps"}. After warm-up it writes its pid to
<GATE_DIR>/ready<R> so that the gate knows whom to hit. Roles (GATE_ROLE_<R>): "slow" sleeps 4x
its step time every step (a rank 5x slower), "leave" leaves the loop early (writes "left" with
its time) and shuts down. SIGTERM from the launcher is ignored so that a survivor reports its own
error (the launcher kills it after its grace period if it never does)."""

import json
import os
import signal
import sys
import time

import numpy as np

from horovod import _core
from horovod.common.exceptions import HorovodInternalError
from horovod.common.ops import Sum

signal.signal(signal.SIGTERM, signal.SIG_IGN)
out_dir = os.environ['GATE_DIR']
warmup = int(os.environ.get('GATE_WARMUP_STEPS', '30'))
steps = int(os.environ.get('GATE_STEPS', '1000000'))
elements = int(os.environ.get('GATE_ELEMENTS', str(1 << 16)))


def record(rank, **fields):
    path = os.path.join(out_dir, 'rank{}.json'.format(rank))
    with open(path + '.tmp', 'w') as f:
        json.dump(dict(rank=rank, **fields), f)
    os.replace(path + '.tmp', path)


_core.init(None, False)
rank = _core.rank()
role = os.environ.get('GATE_ROLE_{}'.format(rank), '')
data = np.ones(elements, np.float32)
step = 0
step_time = 0.0
try:
    while step < steps:
        started = time.time()
        _core.allreduce_async(data, None, 'g{}'.format(step % 4), Sum, 1.0, 1.0, 0).wait()
        step += 1
        took = time.time() - started
        step_time = took if step == 1 else 0.9 * step_time + 0.1 * took
        if step == warmup:
            with open(os.path.join(out_dir, 'ready{}'.format(rank)), 'w') as f:
                f.write(str(os.getpid()))
        if role == 'slow' and step > warmup:
            time.sleep(4 * step_time)
        if role == 'leave' and step == warmup + 20:
            record(rank, event='left', t=time.time(), steps=step)
            _core.shutdown()
            sys.exit(0)
except HorovodInternalError as e:
    record(rank, event='error', type=type(e).__name__, err_rank=getattr(e, 'rank', None), message=str(e),
           t=time.time(), steps=step)
    _core.shutdown()
    sys.exit(1)
except Exception as e:  # noqa: B902 - an untyped error is a gate failure, recorded as such
    record(rank, event='error', type=type(e).__name__, err_rank=None, message=str(e), t=time.time(),
           steps=step)
    sys.exit(2)
record(rank, event='done', steps=step, t=time.time())
_core.shutdown()
