#!/usr/bin/env python3
"""GPU mode of the benchmarks (needs a GPU and torch with CUDA; run by tests/gpu/run_on_device.sh).

    horovodrun -np 2 python3 bench/gpu_bench.py allreduce [--max-mib 1024]
    python3 bench/gpu_bench.py kernels

allreduce  bus bandwidth of hvd.allreduce_ on torch CUDA tensors (whatever path
           HOROVOD_GPU_OPERATIONS selects; the device script sets "host": the host-staged path,
           the one that runs several ranks on one GPU) against torch.distributed's gloo
           all_reduce on the same CUDA tensors in the same processes, 1 MiB to --max-mib,
           busbw = bytes * 2 (n - 1) / n / time. Each size: warm-ups, then the median of
           repetitions, each timed on rank 0 from a barrier to the result being on the device.
kernels    the fusion kernels' achieved bandwidth (bytes read + written per second) through
           Horovod's kernel table (hvd_cuda_kernels_v1 of libhorovod_cuda_kernels.so): batched
           pack of 64 tensors into a fusion buffer and the in-place scale, against a
           device-to-device copy of the same bytes (torch's copy_), CUDA events on one stream,
           median of repetitions.
Each mode prints a table and one line "gpu_bench <mode>: ... ratio <x>" (the goals: host-staged
>= 1x gloo; kernels >= 0.7x copy).
"""
import argparse
import ctypes
import glob
import os
import socket
import statistics
import sys

import torch

FLOAT32 = 8  # hvd::DataType::kFloat32


def median_time(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        times.append(fn())
    return statistics.median(times)


def allreduce_mode(args):
    import torch.distributed as dist

    import horovod.torch as hvd
    hvd.init()
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    rank, n = hvd.rank(), hvd.size()
    port = None
    if rank == 0:
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
    port = hvd.broadcast_object(port, root_rank=0, name='gpu_bench.port')
    dist.init_process_group('gloo', init_method='tcp://127.0.0.1:%d' % port, rank=rank,
                            world_size=n)
    rows = []
    mib = 1
    while mib <= args.max_mib:
        count = mib * (1 << 20) // 4
        t = torch.ones(count, device='cuda')
        reps = 10 if mib <= 64 else 5 if mib <= 256 else 3

        def timed(op):
            def run():
                torch.cuda.synchronize()
                dist.barrier()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                op()
                end.record()
                end.synchronize()
                return start.elapsed_time(end) / 1e3
            return run

        name = 'gpu_bench.%d' % mib
        hvd_s = median_time(timed(lambda: hvd.allreduce_(t, op=hvd.Sum, name=name)), reps)
        gloo_s = median_time(timed(lambda: dist.all_reduce(t)), reps)
        bus = mib * (1 << 20) * 2 * (n - 1) / n
        rows.append((mib, bus / hvd_s / 1e9, bus / gloo_s / 1e9))
        del t
        mib *= 4
    dist.destroy_process_group()
    path = os.environ.get('HOROVOD_GPU_OPERATIONS', '(default)')
    hvd.shutdown()
    if rank != 0:
        return 0
    print('| size | horovod (%s) GB/s | gloo GB/s | ratio |' % path)
    print('|---:|---:|---:|---:|')
    for mib, h, g in rows:
        print('| %d MiB | %.2f | %.2f | %.2f |' % (mib, h, g, h / g))
    ratio = statistics.median(h / g for _, h, g in rows)
    print('gpu_bench allreduce: %d ranks, %s path vs gloo-CUDA, busbw ratio (median over sizes) '
          '%.2f, at %d MiB %.2f' % (n, path, ratio, rows[-1][0], rows[-1][1] / rows[-1][2]))
    return 0


class _Kernels(ctypes.Structure):
    _fields_ = [
        ('version', ctypes.c_int),
        ('batchedCopy', ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
                                         ctypes.c_void_p)),
        ('scale', ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int64, ctypes.c_int, ctypes.c_double,
                                   ctypes.c_void_p)),
    ]


def kernel_table():
    import horovod
    here = os.path.dirname(horovod.__file__)
    found = sorted(glob.glob(os.path.join(here, '**', 'libhorovod_cuda_kernels*.so*'),
                             recursive=True))
    if not found:
        raise SystemExit('gpu_bench kernels: no libhorovod_cuda_kernels.so under ' + here)
    lib = ctypes.CDLL(found[0])
    get = lib.hvd_cuda_kernels_v1
    get.restype = ctypes.POINTER(_Kernels)
    return found[0], get().contents


def kernels_mode(args):
    path, table = kernel_table()
    stream = torch.cuda.current_stream()
    handle = ctypes.c_void_p(stream.cuda_stream)
    total = args.kernel_mib << 20
    pieces = 64
    each = total // pieces // 4
    srcs = [torch.rand(each, device='cuda') for _ in range(pieces)]
    fused = torch.empty(each * pieces, device='cuda')
    dsts = [fused[i * each:(i + 1) * each] for i in range(pieces)]
    dst_p = (ctypes.c_void_p * pieces)(*[d.data_ptr() for d in dsts])
    src_p = (ctypes.c_void_p * pieces)(*[s.data_ptr() for s in srcs])
    sizes = (ctypes.c_size_t * pieces)(*([each * 4] * pieces))
    flat_src = torch.rand(each * pieces, device='cuda')
    flat_dst = torch.empty_like(flat_src)

    def timed(launch):
        def run():
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            launch()
            end.record(stream)
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return run

    def check(status, what):
        if status != 0:
            raise SystemExit('gpu_bench kernels: %s returned CUDA error %d' % (what, status))

    bytes_moved = 2 * each * pieces * 4  # read + written
    copy_s = median_time(timed(lambda: flat_dst.copy_(flat_src)), 20)
    pack_s = median_time(timed(lambda: check(table.batchedCopy(dst_p, src_p, sizes, pieces,
                                                               handle), 'batchedCopy')), 20)
    scale_s = median_time(timed(lambda: check(table.scale(fused.data_ptr(), fused.data_ptr(),
                                                          fused.numel(), FLOAT32, 0.5, handle),
                                              'scale')), 20)
    torch.cuda.synchronize()
    for i in range(pieces):  # the pack's result, after the scales (0.5 ** reps applied)
        assert torch.equal(fused[i * each:(i + 1) * each] != 0, srcs[i] != 0), 'pack %d' % i
    copy_bw, pack_bw, scale_bw = (bytes_moved / s / 1e9 for s in (copy_s, pack_s, scale_s))
    print('| %d MiB in %d pieces | GB/s (read + write) | vs copy |' % (args.kernel_mib, pieces))
    print('|---|---:|---:|')
    print('| device-to-device copy (torch copy_) | %.0f | 1.00 |' % copy_bw)
    print('| batchedCopy (fusion pack) | %.0f | %.2f |' % (pack_bw, pack_bw / copy_bw))
    print('| scale (float32, in place) | %.0f | %.2f |' % (scale_bw, scale_bw / copy_bw))
    print('gpu_bench kernels: %s on %s: pack ratio %.2f, scale ratio %.2f of copy (%.0f GB/s)'
          % (os.path.basename(path), torch.cuda.get_device_name(), pack_bw / copy_bw,
             scale_bw / copy_bw, copy_bw))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('mode', choices=['allreduce', 'kernels'])
    parser.add_argument('--max-mib', type=int, default=1024)
    parser.add_argument('--kernel-mib', type=int, default=256)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print('gpu_bench: no CUDA device (torch.cuda.is_available() is False)')
        return 77
    return allreduce_mode(args) if args.mode == 'allreduce' else kernels_mode(args)


if __name__ == '__main__':
    sys.exit(main())
