"""Keras callbacks for Horovod training with ``tf.keras`` (see ``horovod._keras.callbacks``
for what each does)."""

import tensorflow as tf

from horovod._keras.callbacks import define_callbacks
from horovod.tensorflow.keras import _backend

(BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateScheduleCallback,
 LearningRateWarmupCallback, BestModelCheckpoint) = define_callbacks(tf.keras, _backend, __name__)
