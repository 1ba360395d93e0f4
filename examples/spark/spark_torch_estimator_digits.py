#!/usr/bin/env python3
"""TorchEstimator: fit a digits classifier on a Spark DataFrame, then transform a test DataFrame.

    python examples/spark/spark_torch_estimator_digits.py [--master local[2]] [--store /tmp/hvd_store]

The DataFrame is built from scikit-learn's bundled digits set (features as ml vectors). fit()
writes it as Parquet into the store, trains on 2 Horovod processes (20% held out for
validation), and returns a TorchModel; transform() adds the logits column. Prints the per-epoch
history and the test accuracy of the transformed DataFrame."""

import argparse
import sys
import tempfile

import cloudpickle
import torch
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from horovod.spark.common.store import LocalStore
from horovod.spark.torch import TorchEstimator


def accuracy(output, label):
    return (output.argmax(1) == label).float().mean().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--master', default='local[2]')
    parser.add_argument('--num-proc', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=8)
    parser.add_argument('--store', default=None, help='store directory (default: a temporary one)')
    args = parser.parse_args()
    spark = (SparkSession.builder.master(args.master).appName('horovod-torch-estimator-digits')
             .config('spark.ui.showConsoleProgress', 'false').getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # accuracy() travels by value
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)

    def frame(xs, ys):
        return spark.createDataFrame([(Vectors.dense(a.tolist()), int(b)) for a, b in zip(xs, ys)],
                                     ['features', 'label'])

    train_df, test_df = frame(x_train, y_train), frame(x_test, y_test)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    with tempfile.TemporaryDirectory() as tmp:
        estimator = TorchEstimator(
            num_proc=args.num_proc, store=LocalStore(args.store or tmp), model=model,
            optimizer=torch.optim.Adam(model.parameters(), lr=0.01), loss=torch.nn.functional.cross_entropy,
            metrics=[accuracy], feature_cols=['features'], label_cols=['label'], validation=0.2, batch_size=32,
            epochs=args.epochs, random_seed=0, verbose=1)
        trained = estimator.fit(train_df)
    for epoch, (loss, val_accuracy) in enumerate(zip(trained.getHistory()['loss'],
                                                     trained.getHistory()['val_accuracy'])):
        print('epoch {}: training loss {:.4f}, validation accuracy {:.3f}'.format(epoch, loss, val_accuracy))
    rows = trained.setOutputCols(['logits']).transform(test_df).select('label', 'logits').collect()
    correct = sum(int(max(range(10), key=lambda k: r['logits'][k]) == r['label']) for r in rows)
    print('final test accuracy: {:.3f} on {} rows'.format(correct / len(rows), len(rows)))
    spark.stop()


if __name__ == '__main__':
    main()
