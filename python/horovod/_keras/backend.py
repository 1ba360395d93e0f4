"""What the Keras adapters need to know about the Keras they run on.

``KerasBackend(keras_module)`` wraps either Keras 3 (``keras``, or ``tf.keras`` when that is
Keras 3) on any of its backends, or tf-keras 2 (``tf.keras`` with ``TF_USE_LEGACY_KERAS=1``):
reading and writing variable values as numpy, the learning rate, the JAX trainer's state sync,
and the gradient reducer for the backend.
"""

import numpy as np

from horovod._keras import reducers


class KerasBackend:
    def __init__(self, keras):
        self.keras = keras
        version = getattr(keras, '__version__', None)  # tf-keras's tf.keras has none
        self.is_keras3 = bool(version) and int(version.split('.')[0]) >= 3
        self.name = keras.backend.backend() if self.is_keras3 else 'tensorflow'

    @property
    def reducer(self):
        return reducers.for_backend(self.name)

    # ---- values ----------------------------------------------------------------------------

    def to_numpy(self, value):
        """A numpy array of a tensor, variable or Python number (any backend)."""
        if hasattr(value, 'numpy') and not self._is_torch_tensor(value):
            return np.asarray(value.numpy())
        if self.is_keras3:
            return np.asarray(self.keras.ops.convert_to_numpy(value))
        return np.asarray(value)

    @staticmethod
    def _is_torch_tensor(value):
        return type(value).__module__.startswith('torch')

    def to_tensor(self, array):
        """A backend tensor of a numpy array."""
        if self.is_keras3:
            return self.keras.ops.convert_to_tensor(array)
        import tensorflow as tf
        return tf.convert_to_tensor(array)

    def variable_values(self, variables):
        if not self.is_keras3:  # tf-keras: also in TF1 graph mode, through its session
            return [np.asarray(x) for x in self.keras.backend.batch_get_value(list(variables))]
        return [self.to_numpy(v) for v in variables]

    def assign(self, variables, values):
        variables = list(variables)
        if not self.is_keras3:
            self.keras.backend.batch_set_value(
                [(v, np.asarray(x).astype(v.dtype.as_numpy_dtype, copy=False))
                 for v, x in zip(variables, values)])
            return
        for v, x in zip(variables, values):
            v.assign(np.asarray(x).astype(self.to_numpy(v).dtype, copy=False))

    # ---- model state -----------------------------------------------------------------------

    def sync_model_state(self, model):
        """Makes the model's variables current before a callback reads or writes them. Keras's
        JAX trainer keeps the training state outside the variables during ``fit``; syncing
        writes it back, and the next step reads the variables again (so writes take effect)."""
        sync = getattr(model, 'jax_state_sync', None)
        if sync is not None:
            sync()

    def optimizer_variables(self, optimizer):
        variables = getattr(optimizer, 'variables', [])
        if callable(variables):  # tf-keras OptimizerV2
            variables = variables()
        return list(variables)

    # ---- learning rate and momentum --------------------------------------------------------

    def get_lr(self, optimizer):
        lr = optimizer.learning_rate if hasattr(optimizer, 'learning_rate') else optimizer.lr
        if callable(lr) and not hasattr(lr, 'numpy'):
            raise ValueError('The learning rate of {} is a schedule ({}); Horovod\'s learning '
                             'rate callbacks need a fixed (variable) learning rate.'.format(
                                 type(optimizer).__name__, type(lr).__name__))
        return float(self.to_numpy(lr))

    def set_lr(self, optimizer, value):
        optimizer.learning_rate = float(value)

    def scale_momentum(self, optimizer, factor):
        """Momentum correction: makes the next update use momentum * ``factor`` for the
        velocity it inherited. Keras 3 and tf-keras optimizers fold the momentum coefficient
        into compiled steps, so the velocity buffers are scaled instead (the same update:
        momentum * (factor * v) = (momentum * factor) * v). Returns a function undoing what
        must be undone after the batch (nothing for buffers), or None if the optimizer has no
        momentum."""
        if not getattr(optimizer, 'momentum', 0):
            return None
        buffers = getattr(optimizer, 'momentums', None)
        if buffers:
            buffers = buffers.values() if isinstance(buffers, dict) else buffers
            for v in buffers:
                if v is not None:
                    v.assign(v * factor)
            return lambda: None
        # tf-keras OptimizerV2 (legacy): momentum is a hyper-parameter variable.
        old = float(self.to_numpy(optimizer.momentum))
        optimizer.momentum = old * factor

        def restore():
            optimizer.momentum = old
        return restore
