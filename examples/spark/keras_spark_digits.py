#!/usr/bin/env python3
"""KerasEstimator: fit a Keras digits classifier on a Spark DataFrame, then transform a test DataFrame.

    python examples/spark/keras_spark_digits.py [--master local[2]] [--store /tmp/hvd_store] [--tf-keras]

The DataFrame is built from scikit-learn's bundled digits set (features as ml vectors). fit()
writes it as Parquet into the store, runs model.fit on 2 Horovod processes (20% held out for
validation; the metrics are averaged over the processes), and returns a KerasModel;
transform() adds the class probabilities column. Prints the per-epoch history and the test
accuracy of the transformed DataFrame. ``--tf-keras`` trains a tf-keras 2 model instead of a
Keras 3 one."""

import argparse
import tempfile

from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from horovod.spark.common.store import LocalStore
from horovod.spark.keras import KerasEstimator


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--master', default='local[2]')
    parser.add_argument('--num-proc', type=int, default=2)
    parser.add_argument('--epochs', type=int, default=8)
    parser.add_argument('--store', default=None, help='store directory (default: a temporary one)')
    parser.add_argument('--tf-keras', action='store_true', help='a tf-keras 2 model instead of Keras 3')
    args = parser.parse_args()
    if args.tf_keras:
        import tf_keras as keras
    else:
        import keras
    spark = (SparkSession.builder.master(args.master).appName('horovod-keras-estimator-digits')
             .config('spark.ui.showConsoleProgress', 'false').getOrCreate())
    spark.sparkContext.setLogLevel('ERROR')
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)

    def frame(xs, ys):
        return spark.createDataFrame([(Vectors.dense(a.tolist()), int(b)) for a, b in zip(xs, ys)],
                                     ['features', 'label'])

    train_df, test_df = frame(x_train, y_train), frame(x_test, y_test)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation='relu'),
                              keras.layers.Dense(10, activation='softmax')])
    with tempfile.TemporaryDirectory() as tmp:
        estimator = KerasEstimator(
            num_proc=args.num_proc, store=LocalStore(args.store or tmp), model=model,
            optimizer=keras.optimizers.Adam(0.01), loss='sparse_categorical_crossentropy', metrics=['accuracy'],
            feature_cols=['features'], label_cols=['label'], validation=0.2, batch_size=32, epochs=args.epochs,
            random_seed=0, verbose=2)
        trained = estimator.fit(train_df)
    history = trained.getHistory()
    for epoch, (loss, val_accuracy) in enumerate(zip(history['loss'], history['val_accuracy'])):
        print('epoch {}: training loss {:.4f}, validation accuracy {:.3f}'.format(epoch, loss, val_accuracy))
    rows = trained.setOutputCols(['probabilities']).transform(test_df).select('label', 'probabilities').collect()
    correct = sum(int(max(range(10), key=lambda k: r['probabilities'][k]) == r['label']) for r in rows)
    print('final test accuracy: {:.3f} on {} rows'.format(correct / len(rows), len(rows)))
    spark.stop()


if __name__ == '__main__':
    main()
