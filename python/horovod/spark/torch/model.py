"""``TorchModel``: the trained model as a pyspark.ml transformer."""

import cloudpickle
from pyspark.ml import Model

from horovod.spark.common.params import ParamsMixin

__all__ = ['TorchModel']


class TorchModel(ParamsMixin, Model):
    """``transform(df)`` feeds each row's feature columns to the model (one input per column,
    reshaped to ``input_shapes``) and adds one output column per model output: a double for a
    single value per row, else an array of doubles. Output columns default to
    ``<label>__output``; ``setOutputCols([...])`` renames them. ``getModel()`` is the torch
    module, ``getHistory()`` the per-epoch metrics ({'loss': [...], 'val_loss': [...], ...})."""

    _defaults = dict(model=None, history=None, feature_cols=None, label_cols=None, input_shapes=None,
                     output_cols=None, run_id=None)

    def __init__(self, **kwargs):
        super().__init__()
        self._init_settings(kwargs)
        if self._settings['output_cols'] is None:
            self._settings['output_cols'] = ['{}__output'.format(c) for c in self._settings['label_cols']]

    def _transform(self, df):
        from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType
        s = self._settings
        model_bytes = cloudpickle.dumps(s['model'])
        features, shapes = list(s['feature_cols']), s['input_shapes'] or [None] * len(s['feature_cols'])
        outputs = list(s['output_cols'])
        sample = df.select(*features).limit(1).collect()
        if not sample:
            kinds = [DoubleType()] * len(outputs)
        else:
            kinds = [DoubleType() if len(v) == 1 else ArrayType(DoubleType())
                     for v in _predict(s['model'], [sample[0]], features, shapes)[0]]
        schema = StructType(df.schema.fields + [StructField(name, kind) for name, kind in zip(outputs, kinds)])

        def predict_partition(rows):
            model = cloudpickle.loads(model_bytes)
            rows = list(rows)
            for start in range(0, len(rows), 256):
                chunk = rows[start:start + 256]
                for row, values in zip(chunk, _predict(model, chunk, features, shapes)):
                    yield tuple(row) + tuple(v[0] if len(v) == 1 else v for v in values)

        return df.sparkSession.createDataFrame(df.rdd.mapPartitions(predict_partition), schema)


def _predict(model, rows, features, shapes):
    """For each row, a list (one per model output) of lists of floats."""
    import numpy as np
    import torch
    inputs = []
    for i, (column, shape) in enumerate(zip(features, shapes)):
        values = [r[column] for r in rows]
        values = [v.toArray() if hasattr(v, 'toArray') else v for v in values]
        tensor = torch.as_tensor(np.asarray(values, dtype=np.float32))
        inputs.append(tensor.view(-1, *shape) if shape else tensor)
    model.eval()
    with torch.no_grad():
        out = model(*inputs)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    per_output = [o.reshape(len(rows), -1).double().tolist() for o in out]
    return [[per_output[k][i] for k in range(len(per_output))] for i in range(len(rows))]
