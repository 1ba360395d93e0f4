"""A rank killed while a device collective is in flight: every survivor gets
HorovodPeerLostError naming it (a HorovodInternalError), never a hang; later operations fail too.
Runs under the launcher (test_gpu_suite.py); the killed rank exits with status 0 so that the
launcher lets the others finish."""

import os

import numpy as np
import pytest

from horovod import _core
from horovod.common.exceptions import HorovodInternalError, HorovodPeerLostError
from horovod.common.ops import Sum

from cuda_ctypes import Cuda, DeviceTensor


def test_killed_rank_mid_collective():
    _core.init(None, False)
    rank, size = _core.rank(), _core.size()
    cuda = Cuda()
    ordinal = _core.local_rank() % cuda.device_count()
    cuda.set_device(ordinal)
    x = DeviceTensor.of(cuda, np.ones(1 << 20, np.float32), ordinal)
    _core.allreduce_async(x, None, 'killed.warmup', Sum, 1.0, 1.0, 0).wait()
    np.testing.assert_array_equal(x.download()[:4], [size] * 4)
    if rank == size - 1:
        # In flight on this rank (enqueued, maybe started), then gone without a goodbye.
        _core.allreduce_async(x, None, 'killed.lost', Sum, 1.0, 1.0, 0)
        os._exit(0)
    with pytest.raises(HorovodPeerLostError) as info:
        _core.allreduce_async(x, None, 'killed.lost', Sum, 1.0, 1.0, 0).wait()
    assert info.value.rank == size - 1
    with pytest.raises(HorovodInternalError):
        _core.allreduce_async(x, None, 'killed.after', Sum, 1.0, 1.0, 0).wait()
    _core.shutdown()
