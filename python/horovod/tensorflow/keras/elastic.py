"""Elastic training with ``tf.keras``: ``KerasState``, the state callbacks and ``run`` (see
``horovod._keras.elastic``)."""

import tensorflow as tf

from horovod._keras.elastic import define_elastic
from horovod.tensorflow.keras import _backend

(KerasState, CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback,
 run) = define_elastic(tf.keras, _backend, __name__)
