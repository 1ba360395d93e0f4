"""``TorchModel``: the trained torch model as a pyspark.ml transformer."""

import functools

import cloudpickle

from horovod.spark.common.model import HorovodModel, feature_arrays

__all__ = ['TorchModel']


class TorchModel(HorovodModel):
    """``transform(df)`` (see horovod.spark.common.model) with one model input per feature
    column, reshaped to ``input_shapes[i]`` when given; the ``categorical_cols`` the estimator
    was given are int64 inputs, as in training. ``getModel()`` is the torch module."""

    _defaults = dict(HorovodModel._defaults, input_shapes=None, categorical_cols=None)

    def _predictor(self):
        s = self._settings
        shapes = s['input_shapes'] or [None] * len(s['feature_cols'])
        return functools.partial(_load_predictor, cloudpickle.dumps(s['model']), list(s['feature_cols']), shapes,
                                 list(s['categorical_cols'] or []))


def _load_predictor(model_bytes, features, shapes, categorical_cols=()):
    return functools.partial(_predict, cloudpickle.loads(model_bytes), features=features, shapes=shapes,
                             categorical_cols=categorical_cols)


def _predict(model, rows, features, shapes, categorical_cols=()):
    """For each row, a list (one per model output) of lists of floats."""
    import torch
    from horovod.spark.common.datamodule import tabular_types
    arrays = tabular_types(dict(zip(features, feature_arrays(rows, features))), categorical_cols, [])
    inputs = []
    for array, shape in zip((arrays[c] for c in features), shapes):
        tensor = torch.as_tensor(array)
        inputs.append(tensor.view(-1, *shape) if shape else tensor)
    model.eval()
    with torch.no_grad():
        out = model(*inputs)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    per_output = [o.reshape(len(rows), -1).double().tolist() for o in out]
    return [[per_output[k][i] for k in range(len(per_output))] for i in range(len(rows))]
