"""A client of the job's rendezvous store, for Python code that is not an engine: the tasks of
``horovod.spark.run_elastic`` use it to tell the driver their host and to receive their
environment. It speaks the protocol that ``rendezvous_server.py`` documents (and the C++
``TcpStoreServer`` serves): the HMAC handshake, then set/get/add frames.
"""

import hashlib
import hmac
import os
import socket
import struct

__all__ = ['StoreClient', 'StoreTimeout']

_MAGIC = b'HVDA'
_NONCE_BYTES = 32
_DIGEST_BYTES = 32
_CLIENT_IDENTITY = b'horovod-store-client'
_SERVER_IDENTITY = b'horovod-store-server'
_OP_SET, _OP_GET, _OP_ADD = 1, 2, 3
_STATUS_OK, _STATUS_TIMEOUT = 0, 1


class StoreTimeout(TimeoutError):
    """A blocking get whose key did not appear in time."""


def _recv_exact(sock, n):
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError('the rendezvous store closed the connection')
        chunks.append(chunk)
        n -= len(chunk)
    return b''.join(chunks)


def _str32(data):
    return struct.pack('<I', len(data)) + data


def _mac(secret, *parts):
    return hmac.new(secret, b''.join(parts), hashlib.sha256).digest()


class StoreClient:
    """One authenticated connection to the store at ``addr:port``. Not thread-safe.

    Raises ConnectionError when the server refuses ``secret`` or cannot be reached within
    ``connect_timeout_s``."""

    def __init__(self, addr, port, secret, connect_timeout_s=30):
        self.where = '{}:{}'.format(addr, port)
        secret = secret.encode() if isinstance(secret, str) else bytes(secret)
        self._sock = socket.create_connection((addr, int(port)), timeout=connect_timeout_s)
        try:
            challenge = _recv_exact(self._sock, len(_MAGIC) + _NONCE_BYTES)
            if challenge[:len(_MAGIC)] != _MAGIC:
                raise ConnectionError('{} is not a Horovod rendezvous store'.format(self.where))
            nonce_s, nonce_c = challenge[len(_MAGIC):], os.urandom(_NONCE_BYTES)
            proof = _mac(secret, b'client', nonce_s, _CLIENT_IDENTITY, nonce_c)
            self._sock.sendall(struct.pack('<H', len(_CLIENT_IDENTITY)) + _CLIENT_IDENTITY + nonce_c + proof)
            try:
                answer = _recv_exact(self._sock, _DIGEST_BYTES)
            except ConnectionError:
                raise ConnectionError('the rendezvous store at {} refused the job secret'.format(self.where))
            if not hmac.compare_digest(answer, _mac(secret, b'server', nonce_c, nonce_s, _SERVER_IDENTITY)):
                raise ConnectionError('the server at {} does not know the job secret'.format(self.where))
            self._sock.settimeout(None)
        except BaseException:
            self._sock.close()
            raise

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, body):
        self._sock.sendall(struct.pack('<I', len(body)) + body)
        (length,) = struct.unpack('<I', _recv_exact(self._sock, 4))
        reply = _recv_exact(self._sock, length)
        if reply[0] not in (_STATUS_OK, _STATUS_TIMEOUT):
            (n,) = struct.unpack('<I', reply[1:5])
            raise RuntimeError('rendezvous store at {}: {}'.format(self.where, reply[5:5 + n].decode(errors='replace')))
        return reply

    def set(self, key, value):
        self._request(bytes([_OP_SET]) + _str32(key.encode()) + _str32(value))

    def get(self, key, timeout_s):
        """The value of ``key``, waiting up to ``timeout_s`` for it (StoreTimeout after)."""
        reply = self._request(bytes([_OP_GET]) + struct.pack('<Q', int(timeout_s * 1000)) + _str32(key.encode()))
        if reply[0] == _STATUS_TIMEOUT:
            raise StoreTimeout("key '{}' did not appear in the rendezvous store at {} within {:.0f} s".format(
                key, self.where, timeout_s))
        (n,) = struct.unpack('<I', reply[1:5])
        return reply[5:5 + n]

    def add(self, key, delta):
        reply = self._request(bytes([_OP_ADD]) + _str32(key.encode()) + struct.pack('<q', delta))
        return struct.unpack('<q', reply[1:9])[0]
