"""Core names for an adapter's unnamed calls: ``<op prefix><adapter>.noname.<n>``, counted per
process in program order and restarted by every init() and shutdown(), so that ranks issuing the
same sequence of unnamed calls agree on the names."""

from horovod.common import basics as _basics
from horovod.common import ops as _ops


class CallNamer:
    """``namer(prefix, name)`` -> (full core name, one_off): ``prefix + name`` when the caller
    named the call, else the next generated name (one_off: it is never used again)."""

    def __init__(self, adapter):
        self._adapter = adapter
        self._counter = 0
        _basics.on_init_and_shutdown(self.reset)

    def reset(self):
        self._counter = 0

    def __call__(self, prefix, name):
        if name:
            return prefix + name, False
        self._counter += 1
        return '{}{}.{}{}'.format(prefix, self._adapter, _ops.UNNAMED, self._counter), True
