"""A rendezvous server in Python, for jobs whose workers are not started by ``horovodrun``
(``horovod.ray`` actors, ``horovod.spark`` tasks). The workers' engine reaches it exactly as it
reaches the launcher's: ``HOROVOD_GLOO_RENDEZVOUS_ADDR`` / ``_PORT`` and ``HOROVOD_SECRET_KEY``.

It speaks the key-value store protocol of the C++ ``TcpStoreServer`` (``cpp/store/
store_protocol.h`` and the handshake of ``cpp/common/hmac.h``); ``tests/python/test_ray.py`` and
``test_spark.py`` run real engines against it, so a change of that protocol fails them.

Wire format, in short (integers little-endian):
  handshake  server: b'HVDA' | nonce_s[32]
             client: u16 id_len | id | nonce_c[32] | HMAC(secret, b'client' nonce_s id nonce_c)
             server: HMAC(secret, b'server' nonce_c nonce_s server_id)
  then frames u32 length | body; request body u8 op | fields, response u8 status | fields:
    set  str key, bytes value           -> ok
    get  u64 timeout_ms, str key        -> ok bytes value | timeout u32 n, str missing...
    add  str key, i64 delta             -> ok i64 value (counters are decimal text)
    wait u64 timeout_ms, u32 n, str...  -> ok | timeout u32 n, str missing...
  str/bytes are u32 length | bytes. A failed handshake closes the connection unanswered.

Unauthenticated connections are bounded as in the C++ server: each must finish the handshake
within 5 s, at most 256 may be in the handshake at once (the oldest is dropped to admit a new
one), and refusals are logged at most 5 times per 10 s, then summarised.

One thread per connection; a blocking get/wait parks its thread on a condition variable until
the keys exist or its timeout passes. Jobs have a handful of connections per worker, so threads
are cheap enough here.
"""

import hashlib
import hmac
import logging
import os
import socket
import socketserver
import struct
import collections
import threading
import time

__all__ = ['RendezvousServer']

_MAGIC = b'HVDA'
_NONCE_BYTES = 32
_DIGEST_BYTES = 32
_MAX_IDENTITY_BYTES = 1024
_MAX_FRAME_BYTES = 1 << 30
_CLIENT_IDENTITY = b'horovod-store-client'
_SERVER_IDENTITY = b'horovod-store-server'
_HANDSHAKE_TIMEOUT_S = 5
_MAX_PENDING_HANDSHAKES = 256
_REFUSAL_LOG_BURST = 5
_REFUSAL_LOG_WINDOW_S = 10.0
_NO_TIMEOUT = (1 << 64) - 1

_OP_SET, _OP_GET, _OP_ADD, _OP_WAIT = 1, 2, 3, 4
_STATUS_OK, _STATUS_TIMEOUT, _STATUS_ERROR = 0, 1, 2

_log = logging.getLogger('horovod.rendezvous')


class _Reader:
    """Decodes one frame body; running past its end raises ValueError (a malformed request)."""

    def __init__(self, body):
        self._body = body
        self._at = 0

    def take(self, n):
        if self._at + n > len(self._body):
            raise ValueError('truncated')
        chunk = self._body[self._at:self._at + n]
        self._at += n
        return chunk

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return struct.unpack('<I', self.take(4))[0]

    def u64(self):
        return struct.unpack('<Q', self.take(8))[0]

    def i64(self):
        return struct.unpack('<q', self.take(8))[0]

    def bytes32(self):
        return self.take(self.u32())


def _str32(data):
    return struct.pack('<I', len(data)) + data


def _recv_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError('closed')
        chunks.append(chunk)
        n -= len(chunk)
    return b''.join(chunks)


def _mac(secret, *parts):
    return hmac.new(secret, b''.join(parts), hashlib.sha256).digest()


class _KeyValues:
    """The store's contents; every access under one condition variable."""

    def __init__(self):
        self.cond = threading.Condition()
        self.data = {}

    def wait_for(self, keys, timeout_ms, stopping):
        """Blocks until every key exists (True), the timeout passes or the server stops (False).
        Call with ``cond`` held."""
        deadline = None if timeout_ms == _NO_TIMEOUT else time.monotonic() + timeout_ms / 1000.0
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
                (length,) = struct.unpack('<I', _recv_exact(sock, 4))
                if length == 0 or length > _MAX_FRAME_BYTES:
                    _log.warning('rendezvous server: bad frame of %d bytes from %s; closing', length,
                                 self.client_address)
                    return
                reply = self._answer(server, _Reader(_recv_exact(sock, length)))
                sock.sendall(struct.pack('<I', len(reply)) + reply)
        except socket.timeout:
            server.note_refused(self.client_address,
                                'did not authenticate within {} s'.format(_HANDSHAKE_TIMEOUT_S))
        except (ConnectionError, OSError):
            return

    def _authenticate(self, server, sock):
        sock.settimeout(_HANDSHAKE_TIMEOUT_S)
        nonce_s = os.urandom(_NONCE_BYTES)
        sock.sendall(_MAGIC + nonce_s)
        (id_len,) = struct.unpack('<H', _recv_exact(sock, 2))
        if id_len > _MAX_IDENTITY_BYTES:
            server.note_refused(self.client_address, 'sent a malformed handshake')
            return False
        identity = _recv_exact(sock, id_len)
        nonce_c = _recv_exact(sock, _NONCE_BYTES)
        proof = _recv_exact(sock, _DIGEST_BYTES)
        expected = _mac(server.secret, b'client', nonce_s, identity, nonce_c)
        if identity != _CLIENT_IDENTITY or not hmac.compare_digest(proof, expected):
            server.note_refused(self.client_address, 'failed to prove the job secret')
            return False
        sock.sendall(_mac(server.secret, b'server', nonce_c, nonce_s, _SERVER_IDENTITY))
        return True

    def _answer(self, server, r):
        store = server.store
        op = None
        try:
            op = r.u8()
            if op == _OP_SET:
                key, value = r.bytes32(), r.bytes32()
                with store.cond:
                    store.data[key] = value
                    store.cond.notify_all()
                return bytes([_STATUS_OK])
            if op == _OP_ADD:
                key, delta = r.bytes32(), r.i64()
                with store.cond:
                    old = store.data.get(key, b'0')
                    try:
                        value = int(old.decode('ascii')) + delta
                    except (UnicodeDecodeError, ValueError):
                        return bytes([_STATUS_ERROR]) + _str32(
                            "add() on rendezvous key '{}' whose value is not an integer".format(
                                key.decode(errors='replace')).encode())
                    store.data[key] = str(value).encode('ascii')
                    store.cond.notify_all()
                return bytes([_STATUS_OK]) + struct.pack('<q', value)
            if op in (_OP_GET, _OP_WAIT):
                timeout_ms = r.u64()
                keys = [r.bytes32()] if op == _OP_GET else [r.bytes32() for _ in range(r.u32())]
                with store.cond:
                    if store.wait_for(keys, timeout_ms, server.stopping):
                        return bytes([_STATUS_OK]) + (_str32(store.data[keys[0]]) if op == _OP_GET else b'')
                    absent = [k for k in keys if k not in store.data]
                return bytes([_STATUS_TIMEOUT]) + struct.pack('<I', len(absent)) + b''.join(_str32(k) for k in absent)
        except ValueError:
            names = {_OP_SET: 'set ', _OP_GET: 'get ', _OP_ADD: 'add ', _OP_WAIT: 'wait '}
            return bytes([_STATUS_ERROR]) + _str32('malformed {}request'.format(names.get(op, '')).encode())
        return bytes([_STATUS_ERROR]) + _str32('unknown request {}'.format(op).encode())


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
