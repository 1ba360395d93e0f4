#!/usr/bin/env python3
"""Start-up and training rate of Horovod jobs inside Ray and Spark, beside horovodrun and Ray Train.

    python bench/ray_spark_startup.py [--workers 2,4] [--steps 60] [--out bench/results/ray_spark.md]

Start-up: seconds from the call that starts the job (``RayExecutor.start()``, ``horovod.spark.run()``,
``horovod.run()`` i.e. horovodrun, Ray Train's ``TorchTrainer.fit()``) to the moment the last
worker has finished its first allreduce. The Ray cluster and the Spark session already exist
(their own start-up is reported separately). Wall clocks of one machine, so comparable.

Training rate: samples/s of the same 2-worker loop (an MLP of about 1 M parameters, batch 64
per worker, synthetic data) under RayExecutor + horovod.torch.DistributedOptimizer and under
Ray Train's TorchTrainer (DDP over gloo).
"""

import argparse
import json
import os
import sys
import tempfile
import time

import cloudpickle


# Training rates are the best of this many runs (the machine is shared and noisy).
REPEATS = 2


def first_allreduce():
    """In a worker: init Horovod, one allreduce; returns the wall time when it completed."""
    import torch
    import horovod.torch as hvd
    hvd.init()
    hvd.allreduce(torch.ones(1), name='first')
    return time.time()


def horovod_loop(steps):
    """In a worker: the training loop under horovod.torch; returns samples/s of the whole job."""
    import torch
    import horovod.torch as hvd
    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = torch.randn(64, 1024), torch.randint(0, 10, (64,))
    return _timed(model, optimizer, x, y, steps, lambda: hvd.size(), hvd.barrier)


def ddp_loop(config):
    """In a Ray Train worker: the same loop under DDP (gloo); reports samples/s."""
    import torch
    import torch.distributed as dist
    import ray.train
    import ray.train.torch
    start_first = time.time()
    dist.all_reduce(torch.ones(1))
    first_done = time.time()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 1024), torch.randint(0, 10, (64,))
    rate = _timed(model, optimizer, x, y, config['steps'], dist.get_world_size, dist.barrier)
    if dist.get_rank() == 0:
        # Ray Train 2.x keeps Result.metrics only for reports with a checkpoint: use a file.
        with open(config['out'], 'w') as f:
            json.dump({'first_allreduce_done': first_done, 'rate': rate, 'start_first': start_first}, f)


def _timed(model, optimizer, x, y, steps, world_size, barrier):
    import torch.nn.functional as F

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(5):
        step()
    barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    barrier()
    return steps * len(x) * world_size() / (time.perf_counter() - started)


def measure_ray(workers, steps):
    import ray
    from horovod.ray import RayExecutor
    rows = {}
    started = time.time()
    ray.init(address='local', num_cpus=max(workers), include_dashboard=False, log_to_driver=False)
    rows['ray.init (local cluster)'] = time.time() - started
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for n in workers:
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=n)
        started = time.time()
        executor.start()
        done = max(executor.run(first_allreduce))
        rows['RayExecutor np={}'.format(n)] = done - started
        if n == 2:
            rows['rate RayExecutor + horovod.torch np=2'] = max(executor.run(horovod_loop, args=[steps])[0]
                                                                for _ in range(REPEATS))
        executor.shutdown()
    try:
        from ray.train import ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer
    except ImportError:
        rows['Ray Train'] = None
    else:
        runs = []
        for _ in range(REPEATS):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, 'ddp.json')
                trainer = TorchTrainer(ddp_loop, train_loop_config={'steps': steps, 'out': out},
                                       scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                                       torch_config=TorchConfig(backend='gloo'))
                started = time.time()
                trainer.fit()
                with open(out) as f:
                    metrics = json.load(f)
            runs.append((metrics['first_allreduce_done'] - started, metrics['rate']))
        rows['Ray Train TorchTrainer (gloo) np=2'] = min(r[0] for r in runs)
        rows['rate Ray Train TorchTrainer (DDP, gloo) np=2'] = max(r[1] for r in runs)
    ray.shutdown()
    return rows


def measure_spark(workers):
    from pyspark.sql import SparkSession
    import horovod.spark
    rows = {}
    started = time.time()
    spark = (SparkSession.builder.master('local[{}]'.format(max(workers))).config('spark.ui.enabled', 'false')
             .config('spark.ui.showConsoleProgress', 'false').getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    rows['SparkSession (local[{}])'.format(max(workers))] = time.time() - started
    for n in workers:
        started = time.time()
        done = max(horovod.spark.run(first_allreduce, num_proc=n))
        rows['horovod.spark.run np={}'.format(n)] = done - started
    spark.stop()
    return rows


def measure_horovodrun(workers, steps):
    import horovod
    rows = {}
    for n in workers:
        started = time.time()
        done = max(horovod.run(first_allreduce, num_proc=n))
        rows['horovod.run (horovodrun) np={}'.format(n)] = done - started
    rows['rate horovodrun + horovod.torch np=2'] = max(horovod.run(horovod_loop, args=(steps,), num_proc=2)[0]
                                                       for _ in range(REPEATS))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workers', default='2,4')
    parser.add_argument('--steps', type=int, default=60)
    parser.add_argument('--out', default=None, help='write a markdown table here')
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(',')]
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rows = {}
    for measure in (lambda: measure_horovodrun(workers, args.steps), lambda: measure_ray(workers, args.steps),
                    lambda: measure_spark(workers)):
        part = measure()
        print(part, flush=True)
        rows.update(part)
    load = os.getloadavg()
    lines = ['| measurement | value |', '|---|---|']
    for name, value in rows.items():
        unit = 'samples/s' if name.startswith('rate') else 's'
        lines.append('| {} | {} |'.format(name, 'n/a' if value is None else '{:.1f} {}'.format(value, unit)))
    table = '\n'.join(lines)
    print(table)
    print('load average at the end: {:.1f} {:.1f} {:.1f} on {} CPUs'.format(*load, os.cpu_count()))
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n')


if __name__ == '__main__':
    main()
