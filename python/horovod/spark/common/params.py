"""Keyword parameters with Spark-style accessors for the estimators and models: a class lists
its parameters and defaults in ``_defaults``; ``setBatchSize(64)`` / ``getBatchSize()`` read and
write ``batch_size``, and ``copy({'epochs': 3})`` returns a copy with those changed."""

import copy
import re

__all__ = ['ParamsMixin']


def _snake(camel):
    return re.sub(r'(?<!^)(?=[A-Z])', '_', camel).lower()


class ParamsMixin:
    _defaults = {}
    # Other names of a parameter (Horovod's models call feature_cols feature_columns): they work
    # in the constructor, copy() and the accessors (getFeatureColumns()).
    _aliases = {}

    def _init_settings(self, kwargs):
        kwargs = {self._aliases.get(k, k): v for k, v in kwargs.items()}
        unknown = sorted(set(kwargs) - set(self._defaults))
        if unknown:
            raise TypeError('{}() got unexpected parameters: {}'.format(type(self).__name__, ', '.join(unknown)))
        self._settings = dict(self._defaults)
        self._settings.update(kwargs)

    def __getattr__(self, name):
        # Only called for names not found normally: get<Param> / set<Param>.
        if name.startswith(('get', 'set')) and len(name) > 3 and name[3].isupper():
            key = _snake(name[3:])
            key = type(self)._aliases.get(key, key)
            settings = self.__dict__.get('_settings', {})
            if key in settings:
                if name.startswith('get'):
                    return lambda: settings[key]

                def setter(value):
                    settings[key] = value
                    return self
                return setter
        raise AttributeError('{!r} object has no attribute {!r}'.format(type(self).__name__, name))

    def copy(self, extra=None):
        """A copy with the parameters in ``extra`` ({name: value}, names as in the constructor) set."""
        that = copy.copy(self)
        that._settings = dict(self._settings)
        for key, value in (extra or {}).items():
            name = getattr(key, 'name', key)
            name = self._aliases.get(name, name)
            if name not in that._settings:
                raise ValueError('{} has no parameter {!r}'.format(type(self).__name__, name))
            that._settings[name] = value
        return that
