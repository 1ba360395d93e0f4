"""Elastic Keras training for tests/launcher/test_elastic.py: model.fit inside hvd.elastic.run
with the elastic callbacks. Logs one JSON line per epoch end (epoch, rank, size, round, weights
checksum) to $ELASTIC_LOG; $ELASTIC_FAIL_AT="epoch:rank" makes that rank exit at that epoch's end
(once per job)."""

import json
import os
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd
from horovod import _core

LOG = os.environ['ELASTIC_LOG']
EPOCHS = int(os.environ.get('ELASTIC_EPOCHS', '5'))
FAIL_AT = os.environ.get('ELASTIC_FAIL_AT')


class Record(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if FAIL_AT:
            e, r = map(int, FAIL_AT.split(':'))
            marker = LOG + '.failed'
            if epoch == e and hvd.rank() == r and not os.path.exists(marker):
                open(marker, 'w').close()
                os._exit(3)
        weights = float(sum(np.sum(w) for w in self.model.get_weights()))
        with open(LOG, 'a') as f:
            f.write(json.dumps(dict(epoch=epoch, rank=hvd.rank(), size=hvd.size(),
                                    round=_core.elastic_host_updates()[0], weights=weights,
                                    host=os.environ['HOROVOD_HOSTNAME'], time=time.time())) + '\n')
        time.sleep(0.2)


def main():
    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype('float32')
    y = x.sum(axis=1, keepdims=True)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01))
    model.compile(optimizer=optimizer, loss='mse')
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, batch_size=32, epochs=EPOCHS, initial_epoch=state.epoch, verbose=0,
                  callbacks=[hvd.elastic.CommitStateCallback(state),
                             hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.UpdateEpochStateCallback(state), Record()])

    train(state)
    print('done: rank {} of {}'.format(hvd.rank(), hvd.size()), flush=True)


if __name__ == '__main__':
    main()
