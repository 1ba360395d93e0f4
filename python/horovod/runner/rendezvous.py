"""The job's rendezvous store for jobs whose workers are not started by ``horovodrun``
(``horovod.ray`` actors, ``horovod.spark`` tasks): thin wrappers of the C++ store server and
client in ``horovod._core`` (``cpp/include/horovod/rendezvous.h``), the ones horovodrun uses. The
workers' engine reaches the server exactly as it reaches the launcher's:
``HOROVOD_GLOO_RENDEZVOUS_ADDR`` / ``_PORT`` and ``HOROVOD_SECRET_KEY``.

Unauthenticated connections are bounded as horovodrun's: each must finish the HMAC handshake
within 5 s, at most 256 may be in the handshake at once (the oldest silent one is dropped, with a
busy notice its client retries on, to admit a new one), authenticated clients are served ahead
of them, and refusals are logged as warnings on stderr at most 5 times per 10 s, then summarised
(docs/failures.md, "Connection floods").
"""

from horovod import _core

__all__ = ['RendezvousServer', 'StoreClient', 'StoreTimeout']

_CONNECT_TIMEOUT_S = 30


def _secret_bytes(secret):
    return secret.encode() if isinstance(secret, str) else bytes(secret)


class RendezvousServer:
    """Serves one job's rendezvous store on ``bind_host:port`` (port 0: any free port) from a
    background thread, until ``shutdown()``. ``secret`` is the job's ``HOROVOD_SECRET_KEY`` text
    (give every worker the same). Thread-safe. Raises OSError if it cannot listen.

    ``store`` is the served store from this process (the driver's side): ``set(key, value)``,
    ``add(key, delta)`` (``add(key, 0)`` reads a counter; absent counts as 0) and
    ``try_get(key)`` (the value, or None when the key is not set). None of them waits for
    another party."""

    def __init__(self, secret, bind_host='0.0.0.0', port=0):
        self._server = _core.RendezvousServer(_secret_bytes(secret), bind_host, int(port))
        self.store = self._server

    @property
    def port(self):
        return self._server.port

    @property
    def refused(self):
        """Connections refused for failing the handshake so far."""
        return self._server.refused

    def shutdown(self):
        """Stops serving; parked get/wait requests end. Idempotent."""
        self._server.shutdown()


class StoreTimeout(TimeoutError):
    """A blocking get whose key did not appear in time."""


class StoreClient:
    """One authenticated connection to the store at ``addr:port``, for Python code that is not an
    engine (the tasks of ``horovod.spark.run_elastic`` tell the driver their host and receive
    their environment through it). Not meant to be shared between threads.

    Raises ConnectionError when the server refuses ``secret`` or cannot be reached within
    ``connect_timeout_s``."""

    def __init__(self, addr, port, secret, connect_timeout_s=_CONNECT_TIMEOUT_S):
        self.where = '{}:{}'.format(addr, port)
        try:
            self._client = _core.RendezvousClient(addr, int(port), _secret_bytes(secret), float(connect_timeout_s))
        except _core.RendezvousSecretRefused:
            raise ConnectionError('the rendezvous store at {} refused the job secret'.format(self.where)) from None

    def close(self):
        self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set(self, key, value):
        self._client.set(key, bytes(value))

    def get(self, key, timeout_s):
        """The value of ``key``, waiting up to ``timeout_s`` for it (StoreTimeout after)."""
        value = self._client.get(key, float(timeout_s))
        if value is None:
            raise StoreTimeout("key '{}' did not appear in the rendezvous store at {} within {:.0f} s".format(
                key, self.where, timeout_s))
        return value

    def add(self, key, delta):
        return self._client.add(key, int(delta))
