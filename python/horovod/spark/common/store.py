"""Where the estimators keep their data and runs: materialized Parquet (``intermediate_train_data``,
``intermediate_val_data``, ``intermediate_test_data``) and one folder per run under ``runs``
(checkpoint, logs). Files go through fsspec, so any file system fsspec knows works; the Spark
side writes with ``DataFrame.write.parquet(store.spark_path(...))``.

The classes and methods are Horovod's (``Store``, ``AbstractFilesystemStore``,
``FilesystemStore``, ``LocalStore``, ``HDFSStore``, ``DBFSLocalStore``); paths passed in and
returned are file-system paths without the protocol unless a method says otherwise
(``get_full_path`` adds it, ``get_localized_path`` removes it).
"""

import contextlib
import os
import posixpath
import shutil
import tempfile

import fsspec

__all__ = ['Store', 'AbstractFilesystemStore', 'FilesystemStore', 'LocalStore', 'HDFSStore', 'DBFSLocalStore']


class Store:
    """Base of the stores. ``Store.create(prefix_path)`` picks the class from the path."""

    @staticmethod
    def create(prefix_path, *args, **kwargs):
        if prefix_path.startswith('hdfs://'):
            return HDFSStore(prefix_path, *args, **kwargs)
        if prefix_path.startswith(('dbfs:/', '/dbfs/', 'file:/dbfs/')):
            return DBFSLocalStore(prefix_path, *args, **kwargs)
        return FilesystemStore(prefix_path, *args, **kwargs)


class AbstractFilesystemStore(Store):
    """A store under ``prefix_path`` on a file system: the layout, the paths and file access.
    The file system is fsspec's for the path (``_make_filesystem`` may choose another)."""

    def __init__(self, prefix_path, train_path=None, val_path=None, test_path=None, runs_path=None,
                 save_runs=True, storage_options=None, checkpoint_filename=None):
        self.prefix_path = prefix_path.rstrip('/') or '/'
        self.storage_options = storage_options or {}
        self.fs, root = self._make_filesystem()
        self._root = root
        self._train_path = train_path or self._join('intermediate_train_data')
        self._val_path = val_path or self._join('intermediate_val_data')
        self._test_path = test_path or self._join('intermediate_test_data')
        self._runs_path = runs_path or self._join('runs')
        self.save_runs = save_runs
        self.checkpoint_filename = checkpoint_filename or 'checkpoint'

    def _make_filesystem(self):
        """(file system, root path on it) for ``prefix_path``."""
        return fsspec.core.url_to_fs(self.prefix_path, **self.storage_options)

    def _join(self, *parts):
        return posixpath.join(self._root, *parts)

    def get_filesystem(self):
        """The fsspec file system the store's files live on."""
        return self.fs

    def _protocol(self):
        protocol = self.fs.protocol
        return protocol[0] if isinstance(protocol, (list, tuple)) else protocol

    def matches(self, path):
        """Whether ``path`` (with or without a protocol) lies under this store's prefix."""
        return self.get_localized_path(path).startswith(self._root)

    def get_localized_path(self, path):
        """``path`` without its protocol (``file:///a/b`` -> ``/a/b``)."""
        return self.fs._strip_protocol(path)

    def get_full_path(self, path):
        """``path`` with the file system's protocol (``/a/b`` -> ``file:///a/b``)."""
        return self.spark_path(self.get_localized_path(path))

    def get_full_path_fn(self):
        """A picklable function doing get_full_path."""
        protocol_path = self.spark_path

        def full_path(path):
            return protocol_path(path)
        return full_path

    # -- paths (file-system paths, without protocol) ------------------------------------------
    def get_train_data_path(self, idx=None):
        return self._train_path if idx is None else '{}.{}'.format(self._train_path, idx)

    def get_val_data_path(self, idx=None):
        return self._val_path if idx is None else '{}.{}'.format(self._val_path, idx)

    def get_test_data_path(self, idx=None):
        return self._test_path if idx is None else '{}.{}'.format(self._test_path, idx)

    def get_runs_path(self):
        return self._runs_path

    def get_run_path(self, run_id):
        return posixpath.join(self._runs_path, run_id)

    def get_checkpoint_path(self, run_id):
        return posixpath.join(self.get_run_path(run_id), self.checkpoint_filename) if self.save_runs else None

    def get_logs_path(self, run_id):
        return posixpath.join(self.get_run_path(run_id), self.get_logs_subdir()) if self.save_runs else None

    def saving_runs(self):
        """Whether runs (checkpoints, logs) are kept (``save_runs``)."""
        return self.save_runs

    def get_checkpoint_filename(self):
        return self.checkpoint_filename

    def get_logs_subdir(self):
        return 'logs'

    def get_checkpoints(self, run_id, suffix='.ckpt'):
        """The names (sorted) of the files ending in ``suffix`` in the run's checkpoint folder:
        the checkpoint path when it is a folder (Lightning's), else the run's folder."""
        checkpoint = self.get_checkpoint_path(run_id)
        if checkpoint is None:
            return []
        folder = checkpoint if self.fs.isdir(checkpoint) else self.get_run_path(run_id)
        if not self.fs.exists(folder):
            return []
        return sorted(posixpath.basename(p) for p in self.fs.ls(folder, detail=False) if p.endswith(suffix))

    def get_local_output_dir_fn(self, run_id):
        """A function returning a context manager that gives a fresh local folder for the run's
        output (removed afterwards): ``with store.get_local_output_dir_fn(run_id)() as d:``."""
        @contextlib.contextmanager
        def local_run_path():
            folder = tempfile.mkdtemp(prefix='horovod_run_{}_'.format(run_id))
            try:
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        return local_run_path

    def sync_fn(self, run_id):
        """A function ``sync(local_run_path)`` that copies a local folder's files into the run's
        folder in the store (what training wrote locally: checkpoints, logs)."""
        run_path, fs = self.get_run_path(run_id), self.fs

        def sync(local_run_path):
            fs.makedirs(run_path, exist_ok=True)
            for entry in os.listdir(local_run_path):
                source = os.path.join(local_run_path, entry)
                fs.put(source, posixpath.join(run_path, entry), recursive=os.path.isdir(source))
        return sync

    # -- file access --------------------------------------------------------------------------
    def spark_path(self, path):
        """``path`` as Spark's readers and writers take it (with the file system's protocol)."""
        protocol = self._protocol()
        if protocol in ('file', 'local'):
            return 'file://' + os.path.abspath(path)
        return '{}://{}'.format(protocol, path.lstrip('/'))

    def exists(self, path):
        return self.fs.exists(self.get_localized_path(path))

    def read(self, path):
        """The file's bytes."""
        with self.fs.open(self.get_localized_path(path), 'rb') as f:
            return f.read()

    def write_text(self, path, text):
        with self.open(self.get_localized_path(path), 'w') as f:
            f.write(text)

    def get_parquet_dataset(self, path):
        """A ``pyarrow.parquet.ParquetDataset`` of the Parquet files at ``path``."""
        import pyarrow.parquet as pq
        return pq.ParquetDataset(self.parquet_files(path), filesystem=self.fs)

    def read_serialized_keras_model(self, ckpt_path, model=None, custom_objects=None):
        """The Keras model saved at ``ckpt_path`` (a ``.keras`` file, as KerasEstimator's
        checkpoints hold it), loaded with ``custom_objects``. ``model`` tells Keras 3 from
        tf-keras (default: Keras 3)."""
        import pickle

        from horovod.spark.keras import util
        data = self.read(ckpt_path)
        if data[:2] != b'PK':  # a KerasEstimator checkpoint: a pickled dict holding the model
            data = pickle.loads(data)['model']
        keras = util.import_keras(util.flavour_of(model) if model is not None else util.KERAS3)
        return util.model_from_bytes(keras, data, custom_objects)

    def is_parquet_dataset(self, path):
        return self.fs.exists(path) and any(p.endswith('.parquet') for p in self.fs.ls(path, detail=False))

    def parquet_files(self, path):
        return sorted(p for p in self.fs.ls(path, detail=False) if p.endswith('.parquet'))

    @contextlib.contextmanager
    def open(self, path, mode='rb'):
        if 'w' in mode:
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with self.fs.open(path, mode) as f:
            yield f

    def remove(self, path):
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)


class FilesystemStore(AbstractFilesystemStore):
    """A store under ``prefix_path`` on an fsspec file system (``file://``, local paths,
    ``s3://``, ``gs://``... given the matching fsspec package and ``storage_options``)."""


class LocalStore(FilesystemStore):
    """A FilesystemStore on a local (or shared, mounted) directory: ``LocalStore('/tmp/run')``."""

    def __init__(self, prefix_path, *args, **kwargs):
        path = prefix_path[len('file://'):] if prefix_path.startswith('file://') else prefix_path
        super().__init__(os.path.abspath(path), *args, **kwargs)


class HDFSStore(FilesystemStore):
    """A FilesystemStore on HDFS through fsspec/pyarrow (needs a Hadoop client with libhdfs on
    every node; not exercised by this project's tests)."""

    def __init__(self, prefix_path, host=None, port=None, user=None, kerb_ticket=None, driver='libhdfs',
                 extra_conf=None, *args, **kwargs):
        options = dict(kwargs.pop('storage_options', None) or {})
        options.update({k: v for k, v in (('host', host), ('port', port), ('user', user),
                                          ('kerb_ticket', kerb_ticket), ('extra_conf', extra_conf))
                        if v is not None})
        super().__init__(prefix_path, *args, storage_options=options, **kwargs)


class DBFSLocalStore(LocalStore):
    """Databricks' DBFS through its local mount: ``dbfs:/x`` and ``file:/dbfs/x`` mean ``/dbfs/x``."""

    def __init__(self, prefix_path, *args, **kwargs):
        if prefix_path.startswith('dbfs:/'):
            prefix_path = '/dbfs/' + prefix_path[len('dbfs:/'):]
        elif prefix_path.startswith('file:/dbfs/'):
            prefix_path = prefix_path[len('file:'):]
        super().__init__(prefix_path, *args, **kwargs)
