"""Where the estimators keep their data and runs: materialized Parquet (``intermediate_train_data``,
``intermediate_val_data``, ``intermediate_test_data``) and one folder per run under ``runs``
(checkpoint, history). Files go through fsspec, so any file system fsspec knows works; the
Spark side writes with ``DataFrame.write.parquet(store.spark_path(...))``.
"""

import contextlib
import os
import posixpath

import fsspec

__all__ = ['Store', 'FilesystemStore', 'LocalStore', 'HDFSStore', 'DBFSLocalStore']


class Store:
    """Base of the stores. ``Store.create(prefix_path)`` picks the class from the path."""

    @staticmethod
    def create(prefix_path, *args, **kwargs):
        if prefix_path.startswith('hdfs://'):
            return HDFSStore(prefix_path, *args, **kwargs)
        if prefix_path.startswith(('dbfs:/', '/dbfs/', 'file:/dbfs/')):
            return DBFSLocalStore(prefix_path, *args, **kwargs)
        return FilesystemStore(prefix_path, *args, **kwargs)


class FilesystemStore(Store):
    """A store under ``prefix_path`` on an fsspec file system (``file://``, local paths,
    ``s3://``, ``gs://``... given the matching fsspec package and ``storage_options``)."""

    def __init__(self, prefix_path, train_path=None, val_path=None, test_path=None, runs_path=None,
                 save_runs=True, storage_options=None, checkpoint_filename=None):
        self.prefix_path = prefix_path.rstrip('/') or '/'
        self.storage_options = storage_options or {}
        self.fs, root = fsspec.core.url_to_fs(self.prefix_path, **self.storage_options)
        self._root = root
        self._train_path = train_path or self._join('intermediate_train_data')
        self._val_path = val_path or self._join('intermediate_val_data')
        self._test_path = test_path or self._join('intermediate_test_data')
        self._runs_path = runs_path or self._join('runs')
        self.save_runs = save_runs
        self.checkpoint_filename = checkpoint_filename or 'checkpoint'

    def _join(self, *parts):
        return posixpath.join(self._root, *parts)

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
        return posixpath.join(self.get_run_path(run_id), 'logs') if self.save_runs else None

    # -- file access --------------------------------------------------------------------------
    def spark_path(self, path):
        """``path`` as Spark's readers and writers take it (with the file system's protocol)."""
        protocol = self.fs.protocol[0] if isinstance(self.fs.protocol, (list, tuple)) else self.fs.protocol
        if protocol in ('file', 'local'):
            return 'file://' + os.path.abspath(path)
        return '{}://{}'.format(protocol, path.lstrip('/'))

    def exists(self, path):
        return self.fs.exists(path)

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
