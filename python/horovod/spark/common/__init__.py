"""Framework-neutral pieces of the Spark estimators: stores, data preparation, the Parquet
reader, the backend that runs training on Spark."""
