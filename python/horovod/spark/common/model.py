"""``HorovodModel``: what TorchModel and KerasModel share, a pyspark.ml transformer that adds a
trained model's outputs to a DataFrame.

``transform(df)`` feeds each row's feature columns to the model and adds one output column per
model output: a double for a single value per row, else an array of doubles. Output columns
default to ``<label>__output``; ``setOutputCols([...])`` renames them. ``getModel()`` is the
framework's model, ``getHistory()`` the per-epoch metrics ({'loss': [...], 'val_loss': [...]}).

A subclass implements ``_predictor()``: a picklable callable that, called once per partition on
an executor (and once on the driver to learn the output types), loads the model and returns
``predict(rows) -> [[values of output k (a list of floats) for k in outputs] for each row]``."""

from pyspark.ml import Model

from horovod.spark.common.params import ParamsMixin
from horovod.spark.common.serialization import PersistableMixin

__all__ = ['HorovodModel', 'feature_arrays']

_ROWS_PER_CALL = 256


def feature_arrays(rows, features):
    """One float32 numpy array (rows x elements, or rows) per feature column of ``rows``."""
    import numpy as np
    arrays = []
    for column in features:
        values = [r[column] for r in rows]
        values = [v.toArray() if hasattr(v, 'toArray') else v for v in values]
        arrays.append(np.asarray(values, dtype=np.float32))
    return arrays


class HorovodModel(ParamsMixin, PersistableMixin, Model):
    _defaults = dict(model=None, history=None, feature_cols=None, label_cols=None, output_cols=None, run_id=None)
    _aliases = dict(feature_columns='feature_cols', label_columns='label_cols')  # Horovod's model param names

    def __init__(self, **kwargs):
        super().__init__()
        self._init_settings(kwargs)
        if self._settings['output_cols'] is None:
            self._settings['output_cols'] = ['{}__output'.format(c) for c in self._settings['label_cols']]

    def _predictor(self):
        raise NotImplementedError

    def _transform(self, df):
        from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType
        s = self._settings
        features, outputs = list(s['feature_cols']), list(s['output_cols'])
        make_predict = self._predictor()
        sample = _first_rows(df.select(*features))
        if not sample:
            kinds = [DoubleType()] * len(outputs)
        else:
            values = make_predict()([sample[0]])[0]
            if len(values) != len(outputs):
                raise ValueError('The model has {} outputs but {} output columns are set ({})'.format(
                    len(values), len(outputs), outputs))
            kinds = [DoubleType() if len(v) == 1 else ArrayType(DoubleType()) for v in values]
        schema = StructType(df.schema.fields + [StructField(name, kind) for name, kind in zip(outputs, kinds)])

        def predict_partition(rows):
            predict = None
            chunk = []
            for row in rows:
                chunk.append(row)
                if len(chunk) == _ROWS_PER_CALL:
                    predict = predict or make_predict()
                    yield from _with_outputs(chunk, predict(chunk))
                    chunk = []
            if chunk:
                predict = predict or make_predict()
                yield from _with_outputs(chunk, predict(chunk))

        return df.sparkSession.createDataFrame(df.rdd.mapPartitions(predict_partition), schema)


def _first_rows(df):
    """[the first row of ``df``], or [] when it has none, without ``limit(1)``: on a DataFrame
    built from Python data, a limit stops reading the Python worker that makes a partition
    while it is still writing, and pyspark prints that worker's BrokenPipeError. Partitions are
    read whole instead, as few as needed (1, then 4, 16, ... at a time, as ``take`` does)."""
    rdd = df.rdd
    count = rdd.getNumPartitions()
    start, batch = 0, 1
    while start < count:
        parts = list(range(start, min(count, start + batch)))
        firsts = df.sparkSession.sparkContext.runJob(rdd, _first_of_partition, parts)
        if firsts:
            return firsts[:1]
        start, batch = start + batch, batch * 4
    return []


def _first_of_partition(rows):
    """[the partition's first row] or []; reads the partition to its end."""
    first = []
    for row in rows:
        if not first:
            first.append(row)
    return first


def _with_outputs(rows, predictions):
    for row, values in zip(rows, predictions):
        yield tuple(row) + tuple(v[0] if len(v) == 1 else v for v in values)
