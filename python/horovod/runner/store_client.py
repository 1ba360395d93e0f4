"""A client of the job's rendezvous store, for Python code that is not an engine: the tasks of
``horovod.spark.run_elastic`` use it to tell the driver their host and to receive their
environment. It speaks the protocol that ``store_wire.py`` describes (and the C++
``TcpStoreServer`` serves): the HMAC handshake, then set/get/add frames.
"""

import hmac
import os
import socket
import struct

from horovod.runner import store_wire as wire

__all__ = ['StoreClient', 'StoreTimeout']


class StoreTimeout(TimeoutError):
    """A blocking get whose key did not appear in time."""


class StoreClient:
    """One authenticated connection to the store at ``addr:port``. Not thread-safe.

    Raises ConnectionError when the server refuses ``secret`` or cannot be reached within
    ``connect_timeout_s``."""

    def __init__(self, addr, port, secret, connect_timeout_s=30):
        self.where = '{}:{}'.format(addr, port)
        secret = secret.encode() if isinstance(secret, str) else bytes(secret)
        self._sock = socket.create_connection((addr, int(port)), timeout=connect_timeout_s)
        try:
            challenge = self._recv(len(wire.MAGIC) + wire.NONCE_BYTES)
            if challenge[:len(wire.MAGIC)] != wire.MAGIC:
                raise ConnectionError('{} is not a Horovod rendezvous store'.format(self.where))
            nonce_s, nonce_c = challenge[len(wire.MAGIC):], os.urandom(wire.NONCE_BYTES)
            proof = wire.mac(secret, b'client', nonce_s, wire.CLIENT_IDENTITY, nonce_c)
            self._sock.sendall(struct.pack('<H', len(wire.CLIENT_IDENTITY)) + wire.CLIENT_IDENTITY + nonce_c + proof)
            try:
                answer = self._recv(wire.DIGEST_BYTES)
            except ConnectionError:
                raise ConnectionError('the rendezvous store at {} refused the job secret'.format(self.where))
            if not hmac.compare_digest(answer, wire.mac(secret, b'server', nonce_c, nonce_s, wire.SERVER_IDENTITY)):
                raise ConnectionError('the server at {} does not know the job secret'.format(self.where))
            self._sock.settimeout(None)
        except BaseException:
            self._sock.close()
            raise

    def close(self):
        self._sock.close()

    def _recv(self, n):
        return wire.recv_exact(self._sock, n, 'the rendezvous store at {} closed the connection'.format(self.where))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, body):
        self._sock.sendall(wire.frame(body))
        (length,) = struct.unpack('<I', self._recv(4))
        reply = self._recv(length)
        if reply[0] not in (wire.STATUS_OK, wire.STATUS_TIMEOUT):
            (n,) = struct.unpack('<I', reply[1:5])
            raise RuntimeError('rendezvous store at {}: {}'.format(self.where, reply[5:5 + n].decode(errors='replace')))
        return reply

    def set(self, key, value):
        self._request(bytes([wire.OP_SET]) + wire.str32(key.encode()) + wire.str32(value))

    def get(self, key, timeout_s):
        """The value of ``key``, waiting up to ``timeout_s`` for it (StoreTimeout after)."""
        reply = self._request(bytes([wire.OP_GET]) + struct.pack('<Q', int(timeout_s * 1000))
                              + wire.str32(key.encode()))
        if reply[0] == wire.STATUS_TIMEOUT:
            raise StoreTimeout("key '{}' did not appear in the rendezvous store at {} within {:.0f} s".format(
                key, self.where, timeout_s))
        (n,) = struct.unpack('<I', reply[1:5])
        return reply[5:5 + n]

    def add(self, key, delta):
        reply = self._request(bytes([wire.OP_ADD]) + wire.str32(key.encode()) + struct.pack('<q', delta))
        return struct.unpack('<q', reply[1:9])[0]
