"""Elastic training state, framework-neutral (Horovod's ``horovod.common.elastic``).

A ``State`` is committed periodically (save in memory + collective check for host changes). When
a collective fails (``HorovodInternalError``) the ``run`` wrapper rolls back to the last commit,
re-initializes Horovod, and syncs the state from rank 0 before calling the function again. When
the launcher reports added/removed hosts (``HostsUpdatedInterrupt``) it re-initializes without a
rollback.
"""

import enum
import functools
import os
import queue
import threading

from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


# The TensorFlow ops of Horovod's collectives. A failed collective inside a compiled function (a
# TensorFlow graph, an XLA callback) reaches the training loop wrapped in the framework's own
# error type, whose message names the op.
HOROVOD_OP_NAMES = ('HorovodAllreduce', 'HorovodAllgather', 'HorovodBroadcast', 'HorovodAlltoall',
                    'HorovodReducescatter')


def names_a_horovod_op(error):
    """Whether the message of ``error`` names one of Horovod's collective ops."""
    message = str(error)
    return any(op in message for op in HOROVOD_OP_NAMES)


class HostUpdateResult(enum.IntFlag):
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class State:
    """State representation used for tracking in memory state across workers.

    Args:
        bcast_object: Function used to broadcast a variable from rank 0 to the other workers.
        get_rank: Function that returns the current rank of this worker.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Callbacks run after Horovod was reset (re-initialized), before the state is synced.
        Use them to rescale the learning rate, re-shard data, and so on."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Called by the worker notification service (another thread)."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state in memory, then checks (collectively) for host changes; raises
        HostsUpdatedInterrupt on every rank together when there was one."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Collective: every rank must call it at the same point. Raises HostsUpdatedInterrupt
        when a host-update notification newer than the last processed one arrived."""
        if self._rank() == 0:
            notification_manager.poll()  # rank 0's view is the one broadcast below
        last_updated_timestamp = prev_timestamp = self._last_updated_timestamp
        all_update = HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, update = self._host_messages.get()
            if timestamp > last_updated_timestamp:
                last_updated_timestamp = timestamp
                all_update |= update
        # Rank 0's view wins so that every worker raises (or not) together.
        prev_timestamp, self._last_updated_timestamp, all_update = self._bcast_object(
            (prev_timestamp, last_updated_timestamp, int(all_update)))
        if self._last_updated_timestamp > prev_timestamp:
            raise HostsUpdatedInterrupt(all_update == HostUpdateResult.removed)

    def save(self):
        """Saves state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Restores the last committed state, undoing uncommitted progress."""
        raise NotImplementedError()

    def sync(self):
        """Synchronizes the state across workers (broadcast from rank 0)."""
        raise NotImplementedError()

    def reset(self):
        """Hook run on reset, before the reset callbacks."""
        pass


class ObjectState(State):
    """State for simple Python objects: every keyword argument becomes an attribute.

    Args:
        bcast_object: Function used to broadcast a variable from rank 0 to the other workers.
        get_rank: Function that returns the current rank of this worker.
        kwargs: Properties to sync, accessible as attributes of this object.
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        new_state = {}
        for attr in self._saved_state.keys():
            new_state[attr] = getattr(self, attr)
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


class WorkerNotificationManager:
    """Delivers host-update notifications from the elastic driver to registered states.

    Under horovodrun's elastic driver the driver announces host changes in the job's rendezvous
    store; ``poll()`` reads them (one store round trip; ``State.check_host_updates`` calls it on
    rank 0, so every ``commit()`` sees what was announced before it) and hands new ones to the
    listeners. ``handle_hosts_updated`` can also be called directly (tests, embedding drivers).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._listeners = set()

    def init(self):
        """Kept for Horovod's API: there is no listener service to start (see poll())."""

    def register_listener(self, listener):
        with self._lock:
            self._listeners.add(listener)

    def remove_listener(self, listener):
        with self._lock:
            self._listeners.discard(listener)

    def poll(self):
        """Delivers the host changes announced since this worker's round formed (elastic jobs
        under horovodrun only; otherwise nothing to read)."""
        if not os.environ.get('HOROVOD_ELASTIC_WORKER_ID'):
            return
        from horovod.common.basics import _core
        if _core is None or not _core.is_initialized():
            return
        _round, latest, flags = _core.elastic_host_updates()
        if flags:
            self.handle_hosts_updated(latest, HostUpdateResult(flags))

    def handle_hosts_updated(self, timestamp, update_res):
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener.on_hosts_updated(timestamp, update_res)


notification_manager = WorkerNotificationManager()


def run_fn(func, reset):
    """Wraps ``func(state, *args, **kwargs)`` in Horovod's elastic retry loop; ``reset`` is the
    framework's ``shutdown(); init()``."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        notification_manager.init()
        notification_manager.register_listener(state)
        skip_sync = False
        try:
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except HorovodInternalError:
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as e:
                    skip_sync = e.skip_sync
                reset()
                state.on_reset()
        finally:
            notification_manager.remove_listener(state)

    return wrapper
