"""The small TCP service between ``horovod.run()`` (the driver) and its workers.

The driver serves the cloudpickled ``(func, args, kwargs)`` and collects each rank's
cloudpickled result. Both sides prove knowledge of the job secret before anything is exchanged
(the secret is the one ``horovodrun`` gives every worker as ``HOROVOD_SECRET_KEY``), because
both sides unpickle what they receive.

Wire format, per connection:
  server -> client   nonce_s (32 bytes)
  client -> server   nonce_c (32) | HMAC-SHA256(key, b'client' + nonce_s + nonce_c)
  server -> client   HMAC-SHA256(key, b'server' + nonce_c + nonce_s)
  client -> server   op (1 byte: b'F' fetch function, b'R' put result) | rank (u32) | length (u64) | payload
  server -> client   length (u64) | payload       (b'F': the function; b'R': b'OK')
A connection that fails authentication is closed without a reply.

Under a flood of connections (a hostile or broken process on the driver's network): at most
MAX_PENDING_HANDSHAKES connections may be in the handshake at once, each for at most
HANDSHAKE_TIMEOUT_SECONDS; a new connection beyond that drops the oldest pending one, which is sent
BUSY_ANSWER in place of the server's MAC so that its client connects again (within
IO_TIMEOUT_SECONDS) instead of reporting a wrong secret. A payload's announced length is checked
against MAX_PAYLOAD_BYTES before anything is allocated for it, on both sides. Threads and
descriptors are so bounded by twice MAX_PENDING_HANDSHAKES (the pending ones and those dropped
whose thread has not ended yet) plus the authenticated requests (one per worker at a time).
"""

import collections
import hashlib
import hmac
import os
import socket
import socketserver
import struct
import threading
import time

NONCE_BYTES = 32
DIGEST_BYTES = 32
IO_TIMEOUT_SECONDS = 60
HANDSHAKE_TIMEOUT_SECONDS = 5
MAX_PENDING_HANDSHAKES = 64
MAX_PAYLOAD_BYTES = 1 << 30
# Not secret; no MAC equals it except with probability 2^-256.
BUSY_ANSWER = b'HVD busy: too many handshakes'.ljust(DIGEST_BYTES, b'\0')
OP_FETCH = b'F'
OP_RESULT = b'R'


class AuthenticationError(RuntimeError):
    pass


class _Busy(ConnectionError):
    pass


def _mac(key, *parts):
    return hmac.new(key, b''.join(parts), hashlib.sha256).digest()


def _recv_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError('connection closed by peer')
        chunks.append(chunk)
        n -= len(chunk)
    return b''.join(chunks)


def _check_length(length, what):
    if length > MAX_PAYLOAD_BYTES:
        raise ConnectionError('{} announces {} bytes, more than the limit of {}'.format(what, length,
                                                                                       MAX_PAYLOAD_BYTES))
    return length


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        service = self.server.service
        sock = self.request
        sock.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        try:
            nonce_s = self.server.nonce_sent(sock)  # sent at accept, so a busy notice comes after it
            if nonce_s is None:
                return
            nonce_c = _recv_exact(sock, NONCE_BYTES)
            proof = _recv_exact(sock, DIGEST_BYTES)
            if not hmac.compare_digest(proof, _mac(service.key, b'client', nonce_s, nonce_c)):
                service.refused += 1
                return
            if not self.server.authenticated(sock):
                return  # dropped as busy meanwhile: the client was told and connects again
            sock.settimeout(IO_TIMEOUT_SECONDS)
            sock.sendall(_mac(service.key, b'server', nonce_c, nonce_s))
            op = _recv_exact(sock, 1)
            rank, length = struct.unpack('!IQ', _recv_exact(sock, 12))
            payload = _recv_exact(sock, _check_length(length, 'rank {}\'s request'.format(rank)))
            if op == OP_FETCH:
                reply = service.function_payload
            elif op == OP_RESULT:
                service.put_result(rank, payload)
                reply = b'OK'
            elif op in service.handlers:
                reply = service.handlers[op](rank, payload)
            else:
                return
            sock.sendall(struct.pack('!Q', len(reply)) + reply)
        except (OSError, ConnectionError, struct.error):
            return


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False  # shutdown() must not wait for handshakes a flood holds open
    allow_reuse_address = True
    request_queue_size = 128

    def server_activate(self):
        self._pending = collections.OrderedDict()  # socket -> the challenge sent, in accept order
        self._draining = set()  # dropped as busy, their threads not yet finished
        self._pending_lock = threading.Condition()
        self.dropped_busy = 0
        super().server_activate()

    def process_request(self, request, client_address):
        nonce_s = os.urandom(NONCE_BYTES)
        try:
            if request.send(nonce_s, socket.MSG_DONTWAIT) != NONCE_BYTES:  # a fresh socket's buffer takes it
                raise OSError('short send')
        except OSError:
            self.shutdown_request(request)
            return
        with self._pending_lock:
            # Dropped connections' threads end at once (their socket is shut down); until they
            # have, new connections wait, so threads and descriptors stay within twice the bound.
            while len(self._pending) + len(self._draining) >= 2 * MAX_PENDING_HANDSHAKES:
                self._pending_lock.wait(0.1)
            if len(self._pending) >= MAX_PENDING_HANDSHAKES:
                oldest, _ = self._pending.popitem(last=False)
                self._draining.add(oldest)
                self.dropped_busy += 1
                try:
                    oldest.send(BUSY_ANSWER, socket.MSG_DONTWAIT)
                except OSError:
                    pass
                try:
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread's recv returns at once
                except OSError:
                    pass
            self._pending[request] = nonce_s
        super().process_request(request, client_address)

    def nonce_sent(self, sock):
        """The challenge sent at accept; None if the connection was dropped as busy already."""
        with self._pending_lock:
            return self._pending.get(sock)

    def authenticated(self, sock):
        """Leaves the handshake; False if the connection was dropped as busy meanwhile."""
        with self._pending_lock:
            return self._pending.pop(sock, None) is not None

    def shutdown_request(self, request):
        super().shutdown_request(request)
        with self._pending_lock:
            self._pending.pop(request, None)
            self._draining.discard(request)
            self._pending_lock.notify_all()


class TaskService:
    """Driver side. Serves ``function_payload`` and stores results by rank. Thread-safe.
    ``handlers`` ({op byte: fn(rank, payload) -> reply bytes}) serve further requests of the
    same authenticated format (horovod.spark's MPI mode relays commands through them)."""

    def __init__(self, key, function_payload, bind_host='0.0.0.0', handlers=None):
        self.key = key.encode() if isinstance(key, str) else key
        self.function_payload = function_payload
        self.handlers = dict(handlers or {})
        self.refused = 0
        self._results = {}
        self._lock = threading.Lock()
        self._server = _Server((bind_host, 0), _Handler)
        self._server.service = self
        self._thread = threading.Thread(target=self._server.serve_forever, name='horovod-task-service',
                                        daemon=True)
        self._thread.start()

    @property
    def port(self):
        return self._server.server_address[1]

    def put_result(self, rank, payload):
        with self._lock:
            self._results[rank] = payload

    def results(self):
        with self._lock:
            return dict(self._results)

    def shutdown(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class TaskClient:
    """Worker side: one authenticated request per call."""

    def __init__(self, addr, port, key, rank):
        self.addr = addr
        self.port = port
        self.key = key.encode() if isinstance(key, str) else key
        self.rank = rank

    def _request(self, op, payload=b''):
        # The driver drops connections as busy under a flood: connect again, with a growing pause,
        # for up to IO_TIMEOUT_SECONDS.
        deadline = time.monotonic() + IO_TIMEOUT_SECONDS
        pause = 0.005
        for attempt in range(1, 1 << 30):
            try:
                return self._request_once(op, payload)
            except _Busy:
                if time.monotonic() + pause > deadline:
                    raise ConnectionError('the horovod.run driver at {}:{} dropped {} connection attempts before '
                                          'authenticating (too many connections were waiting to authenticate: a '
                                          'flood of connections to its port?)'.format(self.addr, self.port, attempt))
                time.sleep(pause)
                pause = min(2 * pause, 0.2)

    def _request_once(self, op, payload):
        with socket.create_connection((self.addr, self.port), timeout=IO_TIMEOUT_SECONDS) as sock:
            nonce_s = _recv_exact(sock, NONCE_BYTES)
            nonce_c = os.urandom(NONCE_BYTES)
            try:
                sock.sendall(nonce_c + _mac(self.key, b'client', nonce_s, nonce_c))
            except OSError:
                pass  # dropped as busy before our proof arrived: the notice may still be readable
            try:
                answer = _recv_exact(sock, DIGEST_BYTES)
            except (ConnectionError, OSError):
                raise AuthenticationError('the horovod.run driver at {}:{} refused our secret'.format(
                    self.addr, self.port))
            if answer == BUSY_ANSWER:
                raise _Busy()
            if not hmac.compare_digest(answer, _mac(self.key, b'server', nonce_c, nonce_s)):
                raise AuthenticationError('the service at {}:{} is not this job\'s horovod.run driver'.format(
                    self.addr, self.port))
            sock.sendall(op + struct.pack('!IQ', self.rank, len(payload)) + payload)
            (length,) = struct.unpack('!Q', _recv_exact(sock, 8))
            return _recv_exact(sock, _check_length(length, 'the horovod.run driver\'s reply'))

    def request(self, op, payload=b''):
        """One request of a kind the service's ``handlers`` serve; returns the reply."""
        return self._request(op, payload)

    def fetch_function(self):
        return self._request(OP_FETCH)

    def send_result(self, payload):
        reply = self._request(OP_RESULT, payload)
        if reply != b'OK':
            raise RuntimeError('the horovod.run driver did not acknowledge the result of rank {}'.format(self.rank))
