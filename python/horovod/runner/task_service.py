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
"""

import hashlib
import hmac
import os
import socket
import socketserver
import struct
import threading

NONCE_BYTES = 32
DIGEST_BYTES = 32
IO_TIMEOUT_SECONDS = 60
OP_FETCH = b'F'
OP_RESULT = b'R'


class AuthenticationError(RuntimeError):
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


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        service = self.server.service
        sock = self.request
        sock.settimeout(IO_TIMEOUT_SECONDS)
        try:
            nonce_s = os.urandom(NONCE_BYTES)
            sock.sendall(nonce_s)
            nonce_c = _recv_exact(sock, NONCE_BYTES)
            proof = _recv_exact(sock, DIGEST_BYTES)
            if not hmac.compare_digest(proof, _mac(service.key, b'client', nonce_s, nonce_c)):
                service.refused += 1
                return
            sock.sendall(_mac(service.key, b'server', nonce_c, nonce_s))
            op = _recv_exact(sock, 1)
            rank, length = struct.unpack('!IQ', _recv_exact(sock, 12))
            payload = _recv_exact(sock, length)
            if op == OP_FETCH:
                reply = service.function_payload
            elif op == OP_RESULT:
                service.put_result(rank, payload)
                reply = b'OK'
            else:
                return
            sock.sendall(struct.pack('!Q', len(reply)) + reply)
        except (OSError, ConnectionError, struct.error):
            return


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class TaskService:
    """Driver side. Serves ``function_payload`` and stores results by rank. Thread-safe."""

    def __init__(self, key, function_payload, bind_host='0.0.0.0'):
        self.key = key.encode() if isinstance(key, str) else key
        self.function_payload = function_payload
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
        with socket.create_connection((self.addr, self.port), timeout=IO_TIMEOUT_SECONDS) as sock:
            nonce_s = _recv_exact(sock, NONCE_BYTES)
            nonce_c = os.urandom(NONCE_BYTES)
            sock.sendall(nonce_c + _mac(self.key, b'client', nonce_s, nonce_c))
            try:
                answer = _recv_exact(sock, DIGEST_BYTES)
            except ConnectionError:
                raise AuthenticationError('the horovod.run driver at {}:{} refused our secret'.format(
                    self.addr, self.port))
            if not hmac.compare_digest(answer, _mac(self.key, b'server', nonce_c, nonce_s)):
                raise AuthenticationError('the service at {}:{} is not this job\'s horovod.run driver'.format(
                    self.addr, self.port))
            sock.sendall(op + struct.pack('!IQ', self.rank, len(payload)) + payload)
            (length,) = struct.unpack('!Q', _recv_exact(sock, 8))
            return _recv_exact(sock, length)

    def fetch_function(self):
        return self._request(OP_FETCH)

    def send_result(self, payload):
        reply = self._request(OP_RESULT, payload)
        if reply != b'OK':
            raise RuntimeError('the horovod.run driver did not acknowledge the result of rank {}'.format(self.rank))
