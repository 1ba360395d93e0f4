"""Keras callbacks for Horovod training with standalone Keras (see ``horovod._keras.callbacks``
for what each does)."""

import keras

from horovod._keras.callbacks import define_callbacks
from horovod.keras import _backend

(BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateScheduleCallback,
 LearningRateWarmupCallback, BestModelCheckpoint) = define_callbacks(keras, _backend, __name__)
