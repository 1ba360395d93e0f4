"""Data loader base classes (Horovod 0.28.1's ``horovod/data/data_loader_base.py``).

``BaseDataLoader`` is the interface: a subclass implements ``_iterate()`` (a generator of raw
batches, one epoch per call) and ``__len__`` (batches per epoch); iterating the loader yields
``_process_batch(batch)`` for each of them.

``AsyncDataLoaderMixin`` goes first in the bases of such a loader
(``class MyAsync(AsyncDataLoaderMixin, MyLoader)``): each iteration (``iter(loader)``, one
epoch) starts a background thread that runs ``_iterate()`` and puts the batches into a queue of
``async_loader_queue_size`` batches; the consumer takes them from the queue (``_process_batch``
runs in the consumer's thread). The producer blocks while the queue is full. An exception raised
by ``_iterate()`` in the producer is raised in the consumer by the ``next()`` that reaches it
(after the batches produced before it). The producer thread ends with its epoch, when the
consumer stops early (the iterator is closed or garbage-collected, e.g. ``break`` out of a
``for`` loop), on ``close_async_loader()`` and when the loader is deleted. With
``async_loader_queue_size=0`` there is no thread: ``_iterate()`` runs in the consumer, as in
Horovod.

Differences from Horovod, both so that the thread cannot outlive its consumer: Horovod's
producer kept one thread for the loader's lifetime and ran epoch after epoch ahead of the
consumer; here a thread serves one iteration, so nothing is prefetched across epochs, and the
batches left in the queue when a consumer stops early are dropped (Horovod handed them to the
next iteration). Batches are passed through the queue tagged, so a batch may be ``None`` or an
exception object (Horovod's ``None`` sentinel ended the epoch at such a batch).
"""

import queue
import threading

__all__ = ['BaseDataLoader', 'AsyncDataLoaderMixin']


class BaseDataLoader(object):
    def __len__(self):
        """Number of batches per epoch."""
        raise NotImplementedError()

    def _iterate(self):
        """Yields the raw batches of one epoch (a generator; implemented by subclasses)."""
        raise NotImplementedError()

    def __iter__(self):
        """One epoch: ``_process_batch(batch)`` for every batch of ``_iterate()``."""
        for batch in self._iterate():
            yield self._process_batch(batch)

    def _process_batch(self, batch):
        """Hook to modify a batch before it is returned (a trainer reshapes the data here)."""
        return batch


_BATCH, _ERROR, _END = 0, 1, 2


def _produce(iterate, items, stop):
    """The producer thread: puts (_BATCH, batch) for every batch of ``iterate()``, then
    (_END, None), or (_ERROR, exception) when ``iterate()`` raised. Returns as soon as it sees
    ``stop`` set after a put (the stopper drains the queue so that a blocked put returns)."""
    try:
        batches = iter(iterate())
        try:
            for batch in batches:
                items.put((_BATCH, batch))
                if stop.is_set():
                    return
        finally:
            close = getattr(batches, 'close', None)
            if close is not None:
                close()
    except BaseException as error:  # noqa: B902 - handed to the consumer, which raises it
        items.put((_ERROR, error))
        return
    items.put((_END, None))


class _Epoch(object):
    """One iteration's producer: the thread, its queue and its stop flag."""

    def __init__(self, iterate, size, name):
        self.items = queue.Queue(size)
        self.stop_event = threading.Event()
        self.stopped = False
        self.superseded = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=_produce, args=(iterate, self.items, self.stop_event),
                                       name=name, daemon=True)
        self.thread.start()

    def _drain(self):
        while True:
            try:
                self.items.get_nowait()
            except queue.Empty:
                return

    def stop(self):
        """Stops the producer and waits for it (unless called from the producer itself, e.g.
        by a garbage collection that runs there); drops the batches left in the queue."""
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
        self.stop_event.set()
        if threading.current_thread() is self.thread:
            return
        while self.thread.is_alive():
            self._drain()  # a producer blocked in put() gets its slot, then sees the flag
            self.thread.join(0.05)
        self._drain()
        # Wakes a consumer blocked in get() (close_async_loader from another thread).
        self.items.put_nowait((_END, None))


class AsyncDataLoaderMixin(object):
    """Prefetches the batches of a BaseDataLoader implementation in a background thread (see the
    module docstring). Goes first in the bases::

        class PytorchAsyncDataLoader(AsyncDataLoaderMixin, PytorchDataLoader):
            ...

    ``async_loader_queue_size``: how many batches the queue holds (the producer runs at most
    that many, plus the one it is putting, ahead of the consumer); 0 disables the thread. The
    remaining arguments go to the next class's constructor.
    """

    def __init__(self, async_loader_queue_size=64, *args, **kwargs):
        if (isinstance(async_loader_queue_size, bool) or not isinstance(async_loader_queue_size, int)
                or async_loader_queue_size < 0):
            raise ValueError('async_loader_queue_size must be an integer >= 0 (0: no background thread), got '
                             '{!r}'.format(async_loader_queue_size))
        self.async_loader_queue_size = async_loader_queue_size
        self._async_epoch = None
        super().__init__(*args, **kwargs)

    def __del__(self):
        self.close_async_loader()
        parent = getattr(super(), '__del__', None)
        if parent is not None:
            parent()

    def close_async_loader(self):
        """Stops the background thread of the iteration in progress, if any, and waits for it;
        that iteration ends (its next ``next()`` raises StopIteration). A later ``iter(loader)``
        starts a new one."""
        epoch = getattr(self, '_async_epoch', None)
        if epoch is not None:
            self._async_epoch = None
            epoch.stop()

    def __iter__(self):
        if self.async_loader_queue_size == 0:
            for batch in self._iterate():
                yield self._process_batch(batch)
            return
        # One producer per loader: a new iteration replaces one still in progress, as a new
        # epoch does; the old iterator's next next() raises RuntimeError.
        previous, self._async_epoch = self._async_epoch, None
        if previous is not None:
            previous.superseded = True
            previous.stop()
        epoch = _Epoch(self._iterate, self.async_loader_queue_size,
                       'horovod-async-loader-{}'.format(type(self).__name__))
        self._async_epoch = epoch
        try:
            while True:
                kind, value = (_END, None) if epoch.stopped else epoch.items.get()
                if epoch.stopped:
                    if epoch.superseded:
                        raise RuntimeError('{}: this iteration was replaced by a newer iter() of the same loader '
                                           '(one iteration at a time per loader)'.format(type(self).__name__))
                    return
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise value
                yield self._process_batch(value)
        finally:
            if self._async_epoch is epoch:
                self._async_epoch = None
            epoch.stop()
