"""Moving Keras models and compile arguments between the driver, the training processes and the
executors: which Keras a model belongs to (Keras 3, or tf-keras 2), the model as ``.keras``
bytes, and losses / metrics in a form that survives pickling."""

import os
import sys
import tempfile

import cloudpickle
import numpy as np

__all__ = ['KERAS3', 'TF_KERAS', 'flavour_of', 'import_keras', 'flavour_env', 'model_to_bytes', 'model_from_bytes',
           'pack_objects', 'unpack_objects', 'variable_values', 'input_shapes', 'reshape']

KERAS3, TF_KERAS = 'keras', 'tf_keras'


def flavour_of(model):
    """KERAS3 or TF_KERAS, from the model's class; TypeError for anything else."""
    module = type(model).__module__
    for cls in type(model).__mro__:
        if cls.__module__.startswith('tf_keras'):
            return TF_KERAS
        if cls.__module__.startswith('keras'):
            return KERAS3
    raise TypeError('KerasEstimator needs a Keras model (keras 3 or tf_keras), got {} from {}'.format(
        type(model).__name__, module))


def flavour_env(flavour):
    """The environment a process needs to import the same Keras as the driver: Keras 3's
    backend (KERAS_BACKEND), or TF_USE_LEGACY_KERAS=1 so that tf.keras is tf-keras."""
    if flavour == TF_KERAS:
        return {'TF_USE_LEGACY_KERAS': '1'}
    import keras
    return {'KERAS_BACKEND': keras.backend.backend()}


def import_keras(flavour, env=None):
    """The Keras module of ``flavour``; ``env`` (flavour_env) is applied first unless Keras is
    already imported in this process."""
    if 'keras' not in sys.modules and 'tf_keras' not in sys.modules:
        os.environ.update(env or {})
    if flavour == TF_KERAS:
        import tf_keras
        return tf_keras
    import keras
    return keras


def model_to_bytes(model):
    """The model (architecture, weights, and compile state when compiled) as ``.keras`` bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'model.keras')
        model.save(path)
        with open(path, 'rb') as f:
            return f.read()


def model_from_bytes(keras, data, custom_objects=None, compile=False):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'model.keras')
        with open(path, 'wb') as f:
            f.write(data)
        return keras.models.load_model(path, custom_objects=custom_objects, compile=compile)


def pack_objects(keras, values):
    """``values`` (a loss or metric, or a list / dict of them) made picklable: names stay
    names, Keras Loss and Metric objects become their Keras config, other callables are
    pickled by cloudpickle."""
    if values is None or isinstance(values, str):
        return values
    if isinstance(values, (list, tuple)):
        return [pack_objects(keras, v) for v in values]
    if isinstance(values, dict):
        return {k: pack_objects(keras, v) for k, v in values.items()}
    if isinstance(values, (keras.losses.Loss, keras.metrics.Metric)):
        return ('keras', keras.saving.serialize_keras_object(values))
    return ('pickle', cloudpickle.dumps(values))


def unpack_objects(keras, packed, custom_objects=None):
    if packed is None or isinstance(packed, str):
        return packed
    if isinstance(packed, tuple) and len(packed) == 2 and packed[0] in ('keras', 'pickle'):
        if packed[0] == 'pickle':
            return cloudpickle.loads(packed[1])
        return keras.saving.deserialize_keras_object(packed[1], custom_objects=custom_objects)
    if isinstance(packed, list):
        return [unpack_objects(keras, v, custom_objects) for v in packed]
    return {k: unpack_objects(keras, v, custom_objects) for k, v in packed.items()}


def variable_values(variables):
    """numpy copies of Keras variables (any backend)."""
    return [np.array(v.numpy() if hasattr(v, 'numpy') else v) for v in variables]


def model_inputs(model):
    """The model's input tensors, or None for a model that has none defined yet (a subclassed
    model never called)."""
    try:
        return list(model.inputs) if model.inputs is not None else None
    except AttributeError:
        return None


def input_shapes(model, count):
    """Each of the ``count`` model inputs' shape without the batch dimension, or None where not
    fully known (all None when the model has no inputs defined)."""
    inputs = model_inputs(model)
    if inputs is None:
        return [None] * count
    shapes = []
    for tensor in inputs:
        shape = tuple(tensor.shape)[1:]
        shapes.append(shape if all(d is not None for d in shape) else None)
    return shapes


def reshape(array, shape, what):
    """``array`` (rows first) as rows of ``shape``; ValueError naming ``what`` when the sizes
    differ."""
    if not shape:
        return array
    per_row = int(np.prod(array.shape[1:])) if array.ndim > 1 else 1
    if per_row != int(np.prod(shape)):
        raise ValueError('{} has {} values per row, which do not fit shape {}'.format(what, per_row, tuple(shape)))
    return array.reshape((len(array),) + tuple(shape))
