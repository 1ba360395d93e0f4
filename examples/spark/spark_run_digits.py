#!/usr/bin/env python3
"""horovod.spark.run: train the digits classifier in 2 Spark barrier tasks, one Horovod process
each.

    python examples/spark/spark_run_digits.py [--master local[2]] [--num-proc 2]

Prints each epoch's loss (rank 0, through the executors' output) and the final test accuracy."""

import argparse
import os
import sys

import cloudpickle
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ray'))
import digits_train  # noqa: E402

import horovod.spark  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--master', default='local[2]')
    parser.add_argument('--num-proc', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--lr', type=float, default=0.05)
    args = parser.parse_args()
    spark = (SparkSession.builder.master(args.master).appName('horovod-spark-digits')
             .config('spark.ui.showConsoleProgress', 'false').getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    # The Horovod processes cannot import this script's directory: ship the module by value.
    cloudpickle.register_pickle_by_value(digits_train)
    try:
        results = horovod.spark.run(digits_train.train, args=({'lr': args.lr, 'epochs': args.epochs},),
                                    num_proc=args.num_proc)
    finally:
        spark.stop()
    print('final test accuracy: {:.3f} (rank 0), {} processes'.format(results[0]['test_accuracy'], len(results)))


if __name__ == '__main__':
    main()
