"""The implementation shared by ``horovod.tensorflow.keras`` and ``horovod.keras``.

Modules: ``backend`` (which Keras, which backend, variable values, learning rate),
``numpy_ops`` (collectives on host arrays, straight on the core), ``reducers`` (a step's
gradients, one grouped call per backend), ``settings`` + ``optimizer`` (DistributedOptimizer),
``callbacks``, ``elastic``, ``saving`` (load_model), ``values`` (collectives on values),
``compression`` (casts with keras.ops), ``basics`` (init/shutdown with the counters reset).
"""
