"""Gradient buckets for DistributedOptimizer: contiguous flat buffers that parameters' ``.grad``
are views into, so that autograd accumulates in place and one in-place allreduce per bucket
replaces one allreduce per gradient.

Contract (who calls what):
- ``cap_bytes()`` / ``enabled()`` read the knobs once, when the optimizer is built.
- ``plan()`` and ``Bucket`` are used by ``_DistributedOptimizer._build_buckets()`` at the end of
  its first ``synchronize()``, with a parameter order that every rank of the process set agrees
  on (root's order), so that every rank builds the same buckets with the same names.
- A ``Bucket`` owns its buffer; the views handed to ``p.grad`` must not outlive it (the
  optimizer keeps the buckets for its own lifetime).

Memory: with a core that offers ``shared_buffer(nbytes)`` (a DLPack capsule over a 1-D uint8
region of the rank's shared segment) the buffer lives there, and the core reduces buckets in
place across the ranks' segments without staging copies; otherwise it is an ordinary tensor
and the allreduce takes the core's ordinary path.
"""

import torch

from horovod.common import basics as _basics_mod
from horovod.common.util import env_bool, env_int

# DDP's default too: large enough that the per-operation cost (~tens of us here) is amortized
# over >= 1 ms of reduction, small enough that the first buckets of a large model are reduced
# while backward still computes the rest. A bucket closes once it reaches the cap.
kDefaultCapMb = 25
# A gradient this large gets a bucket of its own (a solo bucket): its allreduce reads autograd's
# fresh gradient directly and writes the bucket, so the copy into the bucket is the engine's (in
# the shared in-place path, of the other ranks' slices only) instead of the training thread's,
# and it starts as soon as that gradient is final. Below this, the hook's copy of a still
# cache-hot gradient is cheaper than an operation of its own.
kSoloBytes = 4 << 20
# Gradient dtypes that go into buckets (others keep the per-gradient path).
kDtypes = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
# Every slot starts on a 64-byte boundary (cache line, AVX-512 vector).
kAlignBytes = 64


def enabled():
    """False when HOROVOD_DISABLE_GRADIENT_BUCKETS is set true."""
    return not env_bool('HOROVOD_DISABLE_GRADIENT_BUCKETS', False)


def cap_bytes(cap_mb=None):
    """The bucket size cap in bytes: ``cap_mb`` if given, else HOROVOD_BUCKET_CAP_MB, else
    kDefaultCapMb. 0 (or negative) means no buckets."""
    if cap_mb is None:
        cap_mb = env_int('HOROVOD_BUCKET_CAP_MB', kDefaultCapMb)
    if cap_mb <= 0 or not enabled():
        return 0
    return int(cap_mb * 1024 * 1024)


def plan(segments, cap):
    """Splits each segment (a list of parameters, in launch order) into buckets: one stream per
    (dtype, device), each bucket closing once it holds ``cap`` bytes or more; a parameter of
    ``min(cap, kSoloBytes)`` bytes or more gets a bucket of its own (``cap`` None: neither, one
    bucket per stream of a segment). Returns a list of parameter lists."""
    out = []
    solo = None if cap is None else min(cap, kSoloBytes)
    for segment in segments:
        open_ = {}
        for p in segment:
            nbytes = p.numel() * p.element_size()
            if solo is not None and nbytes >= solo:
                out.append([p])
                continue
            key = (p.dtype, p.device)
            cur = open_.setdefault(key, [[], 0])
            cur[0].append(p)
            cur[1] += nbytes
            if cap is not None and cur[1] >= cap:
                out.append(cur[0])
                del open_[key]
        out.extend(params for params, _ in open_.values())
    return out


def _align(n, itemsize):
    step = max(1, kAlignBytes // itemsize)
    return (n + step - 1) // step * step


def _allocate(numel, dtype, device):
    """A zero-filled 1-D tensor of ``numel`` elements: in the core's shared segment when it can
    provide one, else an ordinary tensor."""
    core = _basics_mod._core
    if device.type == 'cpu' and hasattr(core, 'shared_buffer') and \
            not env_bool('HOROVOD_DISABLE_SHARED_BUCKETS', False):
        itemsize = torch.empty((), dtype=dtype).element_size()
        try:
            raw = torch.from_dlpack(core.shared_buffer(numel * itemsize))
            flat = raw.view(dtype)[:numel]
            flat.zero_()
            return flat, True
        except Exception:  # no room in the segment, not initialized, ...: ordinary memory
            pass
    return torch.zeros(numel, dtype=dtype, device=device), False


def can_reduce_from(grad, view):
    """Whether a solo bucket's allreduce can read ``grad`` directly and write ``view``: a dense,
    contiguous tensor of the view's dtype, shape and device."""
    return (not grad.is_sparse and grad.dtype == view.dtype and grad.shape == view.shape and
            grad.device == view.device and grad.is_contiguous())


class Bucket:
    """One flat buffer holding the gradients of ``params`` (same dtype and device). A solo
    bucket (one parameter) is reduced as its view, from whatever tensor holds the gradient."""
    __slots__ = ('name', 'params', 'views', 'flat', 'shared', 'pending', 'handle', 'source')

    def __init__(self, name, params):
        self.name = name
        self.params = list(params)
        itemsize = self.params[0].element_size()
        offsets = []
        total = 0
        for p in self.params:
            offsets.append(total)
            total = _align(total + p.numel(), itemsize)
        self.flat, self.shared = _allocate(total, self.params[0].dtype, self.params[0].device)
        self.views = [self.flat[o:o + p.numel()].view(p.shape)
                      for o, p in zip(offsets, self.params)]
        self.pending = len(self.params)  # parameters whose gradient is not final yet
        self.handle = None               # the allreduce in flight
        self.source = None               # a solo bucket's input while it is in flight

    @property
    def solo(self):
        return len(self.params) == 1

    def nbytes(self):
        return self.flat.numel() * self.flat.element_size()
