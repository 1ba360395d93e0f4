"""Turning a DataFrame into the Parquet datasets that training reads (``prepare_data``).

Columns: numeric scalars, ``array<numeric>`` and ``pyspark.ml.linalg`` vectors (stored as
``array<double>``; with ``compress_sparse``, as Spark's own vector struct, in which a
``SparseVector`` keeps only its indices and values: the reader makes them dense again). The
validation split is a float fraction (a seeded random split) or the name of a column whose
true/non-zero rows are validation rows."""

import contextlib
import itertools

__all__ = ['prepare_data', 'check_columns', 'VALIDATION_SEED']

VALIDATION_SEED = 1234
ROW_GROUP_BYTES = 16 << 20
_dataset_counter = itertools.count()


def check_columns(df, columns):
    """Raises ValueError naming any column of ``columns`` that ``df`` lacks or that is not
    numeric / numeric array / vector."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import ArrayType, BooleanType, NumericType
    fields = {f.name: f.dataType for f in df.schema.fields}
    for column in columns:
        if column not in fields:
            raise ValueError('Column {!r} is not in the DataFrame (columns: {})'.format(column, sorted(fields)))
        kind = fields[column]
        ok = isinstance(kind, (NumericType, BooleanType, VectorUDT)) or (
            isinstance(kind, ArrayType) and isinstance(kind.elementType, (NumericType, BooleanType)))
        if not ok:
            raise ValueError('Column {!r} has type {}: the estimators take numeric columns, numeric arrays and '
                             'ml vectors'.format(column, kind.simpleString()))


def _vectors_to_arrays(df, columns):
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import VectorUDT
    for field in df.schema.fields:
        if field.name in columns and isinstance(field.dataType, VectorUDT):
            df = df.withColumn(field.name, vector_to_array(df[field.name]))
    return df


@contextlib.contextmanager
def prepare_data(num_processes, store, df, label_columns, feature_columns, validation=None, sample_weight_col=None,
                 compress_sparse=False, partitions_per_process=10, verbose=0):
    """Writes ``df``'s feature, label (and sample weight) columns as Parquet under
    ``store.get_train_data_path(idx)`` / ``get_val_data_path(idx)`` and yields ``idx`` (for
    ``fit_on_parquet(dataset_idx=idx)``); the files are removed when the block ends.
    ``compress_sparse``: vector columns are written as Spark stores ml vectors (a sparse vector as
    its size, indices and values), which saves disk for sparse data and costs the readers a
    densifying step; otherwise every vector is written as a dense ``array<double>``."""
    label_columns = list(label_columns)
    feature_columns = list(feature_columns)
    columns = feature_columns + label_columns + ([sample_weight_col] if sample_weight_col else [])
    check_columns(df, columns)
    idx = next(_dataset_counter)
    train_path, val_path = store.get_train_data_path(idx), store.get_val_data_path(idx)
    partitions = max(1, num_processes * partitions_per_process)
    if validation is None or validation == 0:
        train, val = df, None
    elif isinstance(validation, float):
        if not 0 < validation < 1:
            raise ValueError('validation must be a fraction in (0, 1) or a column name, got {}'.format(validation))
        train, val = df.randomSplit([1 - validation, validation], seed=VALIDATION_SEED)
    elif isinstance(validation, str):
        if validation not in df.columns:
            raise ValueError('validation column {!r} is not in the DataFrame'.format(validation))
        flag = df[validation].cast('boolean')
        train, val = df.filter(~flag), df.filter(flag)
    else:
        raise ValueError('validation must be a float fraction or a column name, got {!r}'.format(validation))
    try:
        for part, path in ((train, train_path), (val, val_path)):
            if part is None:
                continue
            part = part.select(*columns)
            if not compress_sparse:
                part = _vectors_to_arrays(part, columns)
            if verbose:
                print('horovod.spark: writing {} to {}'.format('training data' if path == train_path else
                                                               'validation data', path))
            # Row groups of at most ROW_GROUP_BYTES: a training process's reader holds a row group's
            # buffers while it decodes it (Parquet's default is 128 MiB).
            part.repartition(partitions).write.mode('overwrite').option('parquet.block.size', ROW_GROUP_BYTES) \
                .parquet(store.spark_path(path))
        yield idx
    finally:
        store.remove(train_path)
        store.remove(val_path)
