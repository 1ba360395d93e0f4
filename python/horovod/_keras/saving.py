"""``load_model``: loads a saved Keras model with its optimizer wrapped in DistributedOptimizer.

Every optimizer class of the Keras in use (and of ``custom_optimizers``) is registered in
``custom_objects`` under its class name and its lower-case class name as a stand-in whose
``from_config`` builds the optimizer and wraps it, so the restored model trains distributed
right away, with its saved optimizer state.
"""


def _subclasses(cls):
    seen, stack = [], [cls]
    while stack:
        c = stack.pop()
        for sub in c.__subclasses__():
            if sub not in seen and not getattr(sub, '_hvd_factory', False):
                seen.append(sub)
                stack.append(sub)
    return seen


def _factory(optimizer_cls, wrap):
    """A class-like stand-in for ``optimizer_cls`` whose ``from_config`` returns the wrapped
    optimizer (Keras deserializers call ``cls.from_config(config)``)."""

    class Factory:
        _hvd_factory = True

        @classmethod
        def from_config(cls, config, custom_objects=None):
            return wrap(optimizer_cls.from_config(config))

        def __new__(cls, *args, **kwargs):
            return wrap(optimizer_cls(*args, **kwargs))

    Factory.__name__ = optimizer_cls.__name__
    return Factory


def optimizer_classes(keras, legacy_opts):
    base = keras.optimizers.Optimizer
    classes = [c for c in _subclasses(base) if not c.__name__.startswith('_')]
    if legacy_opts and hasattr(keras.optimizers, 'legacy'):
        classes += _subclasses(keras.optimizers.legacy.Optimizer)
    return [c for c in classes if not hasattr(c, '_hvd')]


def load_model(backend, wrap, filepath, custom_optimizers=None, custom_objects=None,
               legacy_opts=False):
    """``wrap(optimizer)`` builds the DistributedOptimizer (compression bound by the caller)."""
    keras = backend.keras
    from horovod._keras.optimizer import _DistributedMixin
    objects = {}
    classes = [c for c in optimizer_classes(keras, legacy_opts)
               if not issubclass(c, _DistributedMixin)]
    for cls in classes:
        factory = _factory(cls, wrap)
        objects.setdefault(cls.__name__.lower(), factory)
        objects.setdefault(cls.__name__, factory)
    for cls in custom_optimizers or []:
        objects[cls.__name__] = _factory(cls, wrap)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)
