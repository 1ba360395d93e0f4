"""``horovod.data``: data loader base classes (Horovod 0.28.1). See data_loader_base and
docs/data.md."""

from horovod.data.data_loader_base import AsyncDataLoaderMixin, BaseDataLoader  # noqa: F401

__all__ = ['BaseDataLoader', 'AsyncDataLoaderMixin']
