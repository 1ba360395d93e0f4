#!/usr/bin/env python3
"""Horovod on Ray: train the digits classifier on 2 Ray actors with RayExecutor.

    python examples/ray/ray_digits.py [--num-workers 2] [--address ray://host:10001]

Starts a local Ray cluster unless --address is given (a cluster address or a Ray Client URL).
Prints each epoch's loss (rank 0) and the final test accuracy."""

import argparse
import os
import sys

import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits_train  # noqa: E402

from horovod.ray import RayExecutor  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--num-workers', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--lr', type=float, default=0.05)
    parser.add_argument('--address', default=None)
    args = parser.parse_args()
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(address='local', num_cpus=args.num_workers, include_dashboard=False)
    # The workers cannot import this script's directory: ship the training module by value.
    ray.cloudpickle.register_pickle_by_value(digits_train)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.num_workers)
    executor.start()
    try:
        results = executor.run(digits_train.train, args=[{'lr': args.lr, 'epochs': args.epochs}])
    finally:
        executor.shutdown()
        ray.shutdown()
    print('final test accuracy: {:.3f} (rank 0), {} workers'.format(results[0]['test_accuracy'], len(results)))


if __name__ == '__main__':
    main()
