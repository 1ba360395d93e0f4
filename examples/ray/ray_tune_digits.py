#!/usr/bin/env python3
"""Hyperparameter search with Ray Tune where every trial is a 2-worker Horovod job.

    python examples/ray/ray_tune_digits.py [--samples 3]

Each trial reserves a placement group of 2 one-CPU bundles (plus a zero-CPU bundle for the
trial itself); RayExecutor, created inside the trial, places its workers in that group
(use_current_placement_group=True) and reports the trial's test accuracy. Prints every trial's
learning rate and accuracy and the best configuration."""

import argparse
import os
import sys

import ray
from ray import tune

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits_train  # noqa: E402

from horovod.ray import RayExecutor  # noqa: E402

WORKERS_PER_TRIAL = 2


def trial(config):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=WORKERS_PER_TRIAL,
                           use_current_placement_group=True)
    executor.start()
    try:
        results = executor.run(digits_train.train, args=[dict(config, verbose=False)])
    finally:
        executor.shutdown()
    tune.report({'test_accuracy': results[0]['test_accuracy'], 'loss': results[0]['loss']})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=5)
    args = parser.parse_args()
    ray.init(address='local', num_cpus=WORKERS_PER_TRIAL, include_dashboard=False)
    ray.cloudpickle.register_pickle_by_value(digits_train)
    resources = tune.PlacementGroupFactory([{'CPU': 0}] + [{'CPU': 1}] * WORKERS_PER_TRIAL)
    tuner = tune.Tuner(
        tune.with_resources(trial, resources),
        param_space={'lr': tune.grid_search([0.005, 0.02, 0.08][:args.samples]), 'epochs': args.epochs},
        tune_config=tune.TuneConfig(metric='test_accuracy', mode='max'))
    results = tuner.fit()
    for result in results:
        print('lr {:<6} test accuracy {:.3f}'.format(result.config['lr'], result.metrics['test_accuracy']))
    best = results.get_best_result()
    print('best: lr {} with test accuracy {:.3f}'.format(best.config['lr'], best.metrics['test_accuracy']))
    ray.shutdown()


if __name__ == '__main__':
    main()
