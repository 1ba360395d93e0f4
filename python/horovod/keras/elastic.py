"""Elastic training with standalone Keras: ``KerasState``, the state callbacks and ``run``
(see ``horovod._keras.elastic``)."""

import keras

from horovod._keras.elastic import define_elastic
from horovod.keras import _backend

(KerasState, CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback,
 run) = define_elastic(keras, _backend, __name__)
