"""A rendezvous server in Python, for jobs whose workers are not started by ``horovodrun``
(``horovod.ray`` actors, ``horovod.spark`` tasks). The workers' engine reaches it exactly as it
reaches the launcher's: ``HOROVOD_GLOO_RENDEZVOUS_ADDR`` / ``_PORT`` and ``HOROVOD_SECRET_KEY``.

It speaks the key-value store protocol of the C++ ``TcpStoreServer`` (``store_wire.py``);
``tests/python/test_ray.py`` and ``test_spark.py`` run real engines against it, so a change of
that protocol fails them.

Unauthenticated connections are bounded as in the C++ server: each must finish the handshake
within 5 s, at most 256 may be in the handshake at once (the oldest is dropped to admit a new
one), and refusals are logged at most 5 times per 10 s, then summarised.

One thread per connection; a blocking get/wait parks its thread on a condition variable until
the keys exist or its timeout passes. Jobs have a handful of connections per worker, so threads
are cheap enough here.
"""

import hmac
import logging
import os
import socket
import socketserver
import struct
import collections
import threading
import time

from horovod.runner import store_wire as wire

__all__ = ['RendezvousServer']

_MAX_IDENTITY_BYTES = 1024
_MAX_FRAME_BYTES = 1 << 30
_HANDSHAKE_TIMEOUT_S = 5
_MAX_PENDING_HANDSHAKES = 256
_REFUSAL_LOG_BURST = 5
_REFUSAL_LOG_WINDOW_S = 10.0


_log = logging.getLogger('horovod.rendezvous')


class _KeyValues:
    """The store's contents; every access under one condition variable."""

    def __init__(self):
        self.cond = threading.Condition()
        self.data = {}

    def wait_for(self, keys, timeout_ms, stopping):
        """Blocks until every key exists (True), the timeout passes or the server stops (False).
        Call with ``cond`` held."""
        deadline = None if timeout_ms == wire.NO_TIMEOUT else time.monotonic() + timeout_ms / 1000.0
        while not all(k in self.data for k in keys):
            if stopping.is_set():
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.cond.wait(timeout=1.0 if left is None else min(left, 1.0))
        return True


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        server = self.server.owner
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            server.begin_handshake(sock, self.client_address)
            try:
                authenticated = self._authenticate(server, sock)
            finally:
                dropped = server.end_handshake(sock)
            if not authenticated or dropped:
                return
            sock.settimeout(None)
            while not server.stopping.is_set():
                (length,) = struct.unpack('<I', wire.recv_exact(sock, 4))
                if length == 0 or length > _MAX_FRAME_BYTES:
                    _log.warning('rendezvous server: bad frame of %d bytes from %s; closing', length,
                                 self.client_address)
                    return
                reply = self._answer(server, wire.Reader(wire.recv_exact(sock, length)))
                sock.sendall(wire.frame(reply))
        except socket.timeout:
            server.note_refused(self.client_address,
                                'did not authenticate within {} s'.format(_HANDSHAKE_TIMEOUT_S))
        except (ConnectionError, OSError):
            return

    def _authenticate(self, server, sock):
        sock.settimeout(_HANDSHAKE_TIMEOUT_S)
        nonce_s = os.urandom(wire.NONCE_BYTES)
        sock.sendall(wire.MAGIC + nonce_s)
        (id_len,) = struct.unpack('<H', wire.recv_exact(sock, 2))
        if id_len > _MAX_IDENTITY_BYTES:
            server.note_refused(self.client_address, 'sent a malformed handshake')
            return False
        identity = wire.recv_exact(sock, id_len)
        nonce_c = wire.recv_exact(sock, wire.NONCE_BYTES)
        proof = wire.recv_exact(sock, wire.DIGEST_BYTES)
        expected = wire.mac(server.secret, b'client', nonce_s, identity, nonce_c)
        if identity != wire.CLIENT_IDENTITY or not hmac.compare_digest(proof, expected):
            server.note_refused(self.client_address, 'failed to prove the job secret')
            return False
        sock.sendall(wire.mac(server.secret, b'server', nonce_c, nonce_s, wire.SERVER_IDENTITY))
        return True

    def _answer(self, server, r):
        store = server.store
        op = None
        try:
            op = r.u8()
            if op == wire.OP_SET:
                key, value = r.bytes32(), r.bytes32()
                with store.cond:
                    store.data[key] = value
                    store.cond.notify_all()
                return bytes([wire.STATUS_OK])
            if op == wire.OP_ADD:
                key, delta = r.bytes32(), r.i64()
                with store.cond:
                    old = store.data.get(key, b'0')
                    try:
                        value = int(old.decode('ascii')) + delta
                    except (UnicodeDecodeError, ValueError):
                        return bytes([wire.STATUS_ERROR]) + wire.str32(
                            "add() on rendezvous key '{}' whose value is not an integer".format(
                                key.decode(errors='replace')).encode())
                    store.data[key] = str(value).encode('ascii')
                    store.cond.notify_all()
                return bytes([wire.STATUS_OK]) + struct.pack('<q', value)
            if op in (wire.OP_GET, wire.OP_WAIT):
                timeout_ms = r.u64()
                keys = [r.bytes32()] if op == wire.OP_GET else [r.bytes32() for _ in range(r.u32())]
                with store.cond:
                    if store.wait_for(keys, timeout_ms, server.stopping):
                        return bytes([wire.STATUS_OK]) + (wire.str32(store.data[keys[0]]) if op == wire.OP_GET else b'')
                    absent = [k for k in keys if k not in store.data]
                return (bytes([wire.STATUS_TIMEOUT]) + struct.pack('<I', len(absent))
                        + b''.join(wire.str32(k) for k in absent))
        except ValueError:
            names = {wire.OP_SET: 'set ', wire.OP_GET: 'get ', wire.OP_ADD: 'add ', wire.OP_WAIT: 'wait '}
            return bytes([wire.STATUS_ERROR]) + wire.str32('malformed {}request'.format(names.get(op, '')).encode())
        return bytes([wire.STATUS_ERROR]) + wire.str32('unknown request {}'.format(op).encode())


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False  # connection threads may sit in recv(); shutdown() must not wait for them
    allow_reuse_address = True
    request_queue_size = socket.SOMAXCONN  # a job's workers connect at once


class RendezvousServer:
    """Serves one job's rendezvous store on ``bind_host:port`` (port 0: any free port) from a
    background thread, until ``shutdown()``. ``secret`` is the job's ``HOROVOD_SECRET_KEY`` text
    (give every worker the same). Thread-safe. Raises OSError if it cannot listen."""

    def __init__(self, secret, bind_host='0.0.0.0', port=0):
        self.secret = secret.encode() if isinstance(secret, str) else bytes(secret)
        self.store = _KeyValues()
        self.stopping = threading.Event()
        self.refused = 0
        self._pending = collections.OrderedDict()  # socket -> peer, in accept order
        self._dropped = set()
        self._log_lock = threading.Lock()
        self._log_window_start = 0.0
        self._logged_in_window = 0
        self._suppressed = 0
        self._last_suppressed = ''
        self._server = _Server((bind_host, port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, name='horovod-rendezvous',
                                        daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._server.server_address[1]

    def begin_handshake(self, sock, peer):
        """Registers a connection in the handshake; drops the oldest one when too many are."""
        with self._log_lock:
            oldest = None
            if len(self._pending) >= _MAX_PENDING_HANDSHAKES:
                oldest, oldest_peer = self._pending.popitem(last=False)
                self._dropped.add(oldest)
            self._pending[sock] = peer
        if oldest is not None:
            self.note_refused(oldest_peer, 'dropped before authenticating: {} connections were already in '
                              'the handshake'.format(_MAX_PENDING_HANDSHAKES))
            try:
                oldest.shutdown(socket.SHUT_RDWR)  # its thread's recv ends now
            except OSError:
                pass

    def end_handshake(self, sock):
        """Unregisters a connection; True when it was dropped meanwhile."""
        with self._log_lock:
            self._pending.pop(sock, None)
            if sock in self._dropped:
                self._dropped.discard(sock)
                return True
            return False

    def note_refused(self, peer, why):
        with self._log_lock:
            self.refused += 1
            now = time.monotonic()
            if now - self._log_window_start >= _REFUSAL_LOG_WINDOW_S:
                if self._suppressed:
                    _log.warning('Rendezvous server refused %d more connection(s) in %d s (not logged one by '
                                 'one; the last from %s)', self._suppressed, _REFUSAL_LOG_WINDOW_S,
                                 self._last_suppressed)
                self._log_window_start = now
                self._logged_in_window = 0
                self._suppressed = 0
            if self._logged_in_window < _REFUSAL_LOG_BURST:
                self._logged_in_window += 1
                _log.warning('Rendezvous server refused a connection from %s: %s', peer, why)
            else:
                self._suppressed += 1
                self._last_suppressed = '{}: {}'.format(peer, why)

    def shutdown(self):
        """Stops serving; parked get/wait requests end within a second. Idempotent."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        with self.store.cond:
            self.store.cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
