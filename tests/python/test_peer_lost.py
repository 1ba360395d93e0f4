"""A rank that disappears turns into HorovodPeerLostError (a HorovodInternalError naming the lost
rank) on every survivor, quickly, instead of a hang. Runs under the launcher; the last rank
leaves (exit status 0, so the launcher lets the others finish)."""

import os
import time

import numpy as np
import pytest

from horovod import _core
from horovod.common.exceptions import HorovodInternalError, HorovodPeerLostError
from horovod.common.ops import Sum


def test_lost_rank_fails_pending_and_later_operations():
    _core.init(None, False)
    rank, size = _core.rank(), _core.size()
    if size == 1:
        _core.shutdown()
        pytest.skip('needs 2 ranks')
    _core.barrier_async(0).wait()
    if rank == size - 1:
        time.sleep(0.3)
        os._exit(0)
    start = time.time()
    with pytest.raises(HorovodPeerLostError) as info:
        _core.allreduce_async(np.ones(4, np.float32), None, 'lost', Sum, 1.0, 1.0,
                              0).wait()
    assert info.value.rank == size - 1
    assert isinstance(info.value, HorovodInternalError) and isinstance(info.value, RuntimeError)
    assert time.time() - start < 30
    with pytest.raises(HorovodInternalError):
        _core.allreduce_async(np.ones(4, np.float32), None, 'after', Sum, 1.0, 1.0,
                              0).wait()
    # The lost rank will never say goodbye: shutdown must not wait for it.
    start = time.time()
    _core.shutdown()
    assert time.time() - start < 1.0
