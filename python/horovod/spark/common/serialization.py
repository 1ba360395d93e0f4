"""Spark ML persistence for the estimators and models: ``estimator.save(path)`` /
``estimator.write().overwrite().save(path)`` and ``TorchEstimator.load(path)``, the same for
``TorchModel`` / ``KerasModel``, and therefore inside a saved ``Pipeline`` / ``PipelineModel``.

A saved stage is a folder: Spark's ``metadata`` (class name, uid, timestamp: what
``Pipeline.load`` reads to find the class) and ``horovod/params.pkl``, the stage's parameters
pickled with cloudpickle (the model and optimizer, the store, the columns, the history...). The
``backend`` is not saved: it belongs to the session that trains (a loaded estimator gets the
default SparkBackend, or whatever ``setBackend`` gives it). Loading runs the pickled objects'
code, so load only what you trust, as with any pickle."""

import posixpath

import cloudpickle
import fsspec
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWritable, MLWriter

__all__ = ['PersistableMixin']

_PARAMS_FILE = posixpath.join('horovod', 'params.pkl')
_NOT_SAVED = ('backend',)


class _Writer(MLWriter):
    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def saveImpl(self, path):
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession)
        settings = {k: v for k, v in self.instance._settings.items() if k not in _NOT_SAVED}
        fs, root = fsspec.core.url_to_fs(path)
        target = posixpath.join(root, _PARAMS_FILE)
        fs.makedirs(posixpath.dirname(target), exist_ok=True)
        with fs.open(target, 'wb') as f:
            f.write(cloudpickle.dumps({'uid': self.instance.uid, 'settings': settings}))


class _Reader(MLReader):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path):
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        expected = self.cls.__module__ + '.' + self.cls.__name__
        if metadata['class'] != expected:
            raise TypeError('{} holds a {}, not a {}'.format(path, metadata['class'], expected))
        fs, root = fsspec.core.url_to_fs(path)
        with fs.open(posixpath.join(root, _PARAMS_FILE), 'rb') as f:
            saved = cloudpickle.loads(f.read())
        instance = self.cls(**saved['settings'])
        instance._resetUid(saved['uid'])
        return instance


class PersistableMixin(MLWritable, MLReadable):
    """``write()`` / ``save(path)`` and the class method ``read()`` / ``load(path)``."""

    def write(self):
        return _Writer(self)

    @classmethod
    def read(cls):
        return _Reader(cls)
