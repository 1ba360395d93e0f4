"""``KerasModel``: the trained Keras model as a pyspark.ml transformer."""

import functools

import cloudpickle

from horovod.spark.common.model import HorovodModel, feature_arrays
from horovod.spark.keras import util

__all__ = ['KerasModel']


class KerasModel(HorovodModel):
    """``transform(df)`` (see horovod.spark.common.model) with one model input per feature
    column, reshaped to that input's shape. ``getModel()`` is the Keras model; the executors
    load it with ``custom_objects`` (and the driver's Keras backend, when they have not
    imported Keras yet)."""

    _defaults = dict(HorovodModel._defaults, custom_objects=None)

    def _predictor(self):
        s = self._settings
        flavour = util.flavour_of(s['model'])
        return functools.partial(_load_predictor, flavour, util.flavour_env(flavour),
                                 util.model_to_bytes(s['model']), cloudpickle.dumps(s['custom_objects'] or {}),
                                 list(s['feature_cols']))


def _load_predictor(flavour, env, model_bytes, custom_objects, features):
    keras = util.import_keras(flavour, env)
    model = util.model_from_bytes(keras, model_bytes, cloudpickle.loads(custom_objects))
    shapes = util.input_shapes(model, len(features))

    def predict(rows):
        import numpy as np
        inputs = [util.reshape(a, shape, 'feature column {!r}'.format(c))
                  for a, shape, c in zip(feature_arrays(rows, features), shapes, features)]
        out = model.predict_on_batch(inputs[0] if len(inputs) == 1 else inputs)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        per_output = [np.asarray(o, dtype=np.float64).reshape(len(rows), -1).tolist() for o in out]
        return [[per_output[k][i] for k in range(len(per_output))] for i in range(len(rows))]

    return predict
