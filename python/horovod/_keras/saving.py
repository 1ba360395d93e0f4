"""``load_model``: loads a saved Keras model with its optimizer wrapped in DistributedOptimizer.

Every optimizer class of the Keras in use (and of ``custom_optimizers``) is registered in
``custom_objects`` under its class name and its lower-case class name as a stand-in whose
``from_config`` builds the optimizer and wraps it. Keras 3 resolves its built-in classes
without consulting ``custom_objects`` (and tf-keras's h5 loader may too), so an optimizer that
still comes back unwrapped is wrapped afterwards, its loaded state copied over. Either way the
restored model trains distributed right away, with its saved optimizer state.
"""

import warnings


def _subclasses(cls):
    seen, stack = [], [cls]
    while stack:
        c = stack.pop()
        for sub in c.__subclasses__():
            if sub not in seen and not getattr(sub, '_hvd_factory', False):
                seen.append(sub)
                stack.append(sub)
    return seen


def _factory(candidates, wrap):
    """A class-like stand-in for the optimizer classes ``candidates`` (same class name; tf-keras
    has a current and a legacy ``SGD``, ...): its ``from_config`` builds the first candidate the
    saved config fits and returns it wrapped (Keras deserializers call
    ``cls.from_config(config)``)."""

    class Factory:
        _hvd_factory = True

        @classmethod
        def from_config(cls, config, custom_objects=None):
            error = None
            for candidate in candidates:
                try:
                    optimizer = candidate.from_config(dict(config))
                except (TypeError, ValueError) as e:
                    error = error or e
                    continue
                return wrap(optimizer)
            raise error

        def __new__(cls, *args, **kwargs):
            return wrap(candidates[0](*args, **kwargs))

    Factory.__name__ = candidates[0].__name__
    return Factory


def optimizer_classes(keras, legacy_opts):
    """The optimizer classes of ``keras``, preferred family first: tf-keras's ``legacy``
    classes first when ``legacy_opts``, its current ones first otherwise (Keras 3 has only
    one family)."""
    current = [c for c in _subclasses(keras.optimizers.Optimizer)
               if not c.__name__.startswith('_')]
    legacy_module = getattr(keras.optimizers, 'legacy', None)
    legacy = []
    if legacy_module is not None and hasattr(legacy_module, 'Optimizer'):
        legacy = [c for c in _subclasses(legacy_module.Optimizer)
                  if not c.__name__.startswith('_') and c not in current]
    return legacy + current if legacy_opts else current + legacy


def load_model(backend, wrap, filepath, custom_optimizers=None, custom_objects=None,
               legacy_opts=False):
    """``wrap(optimizer)`` builds the DistributedOptimizer (compression bound by the caller)."""
    keras = backend.keras
    from horovod._keras.optimizer import _DistributedMixin
    by_name = {}
    for cls in optimizer_classes(keras, legacy_opts):
        if not issubclass(cls, _DistributedMixin):
            by_name.setdefault(cls.__name__, []).append(cls)
    objects = {}
    for name, candidates in by_name.items():
        # The class ``keras.optimizers.<name>`` names first (on the torch backend it is the
        # torch subclass of the generic class of the same name).
        exported = getattr(keras.optimizers, name, None)
        candidates.sort(key=lambda c: c is not exported)
        factory = _factory(candidates, wrap)
        objects[name] = factory
        objects.setdefault(name.lower(), factory)
    for cls in custom_optimizers or []:
        factory = _factory([cls], wrap)
        objects[cls.__name__] = factory
        if backend.is_keras3:  # a class registered with register_keras_serializable
            objects[keras.saving.get_registered_name(cls)] = factory
    objects.update(custom_objects or {})
    # Classes registered with register_keras_serializable win over custom_objects in Keras's
    # lookup: their global entries point to the stand-ins while loading.
    registry = keras.utils.get_custom_objects()
    shadowed = {k: registry[k] for k in objects if k in registry}
    registry.update({k: objects[k] for k in shadowed})
    try:
        with keras.utils.custom_object_scope(objects):
            model = keras.models.load_model(filepath, custom_objects=objects)
    finally:
        registry.update(shadowed)
    _wrap_loaded_optimizer(backend, model, wrap)
    return model


def _wrap_loaded_optimizer(backend, model, wrap):
    from horovod._keras.optimizer import _DistributedMixin
    old = getattr(model, 'optimizer', None)
    if old is None or isinstance(old, _DistributedMixin):
        return
    new = wrap(old)
    old_vars = backend.optimizer_variables(old)
    if old_vars:
        if hasattr(new, '_create_all_weights'):  # tf-keras legacy OptimizerV2
            new._create_all_weights(model.trainable_variables)
        else:
            new.build(model.trainable_variables)
        new_vars = backend.optimizer_variables(new)
        if len(new_vars) == len(old_vars):
            backend.assign(new_vars, backend.variable_values(old_vars))
        else:
            warnings.warn('load_model: the loaded optimizer state ({} variables) does not fit '
                          'the distributed optimizer ({} variables); it starts fresh.'.format(
                              len(old_vars), len(new_vars)))
    model.optimizer = new
