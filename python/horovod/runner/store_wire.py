"""The rendezvous store's wire protocol, shared by the Python server (``rendezvous_server.py``)
and client (``store_client.py``); the C++ ``TcpStoreServer`` and ``TcpStore`` speak the same
(``cpp/store/store_protocol.h``, the handshake of ``cpp/common/hmac.h``).

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
"""

import hashlib
import hmac
import struct

MAGIC = b'HVDA'
NONCE_BYTES = 32
DIGEST_BYTES = 32
CLIENT_IDENTITY = b'horovod-store-client'
SERVER_IDENTITY = b'horovod-store-server'
NO_TIMEOUT = (1 << 64) - 1

OP_SET, OP_GET, OP_ADD, OP_WAIT = 1, 2, 3, 4
STATUS_OK, STATUS_TIMEOUT, STATUS_ERROR = 0, 1, 2


class Reader:
    """Decodes one frame body; running past its end raises ValueError (a malformed frame)."""

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


def str32(data):
    """A str/bytes field: u32 length, then the bytes."""
    return struct.pack('<I', len(data)) + data


def frame(body):
    return struct.pack('<I', len(body)) + body


def recv_exact(sock, n, closed_message='closed'):
    """Exactly ``n`` bytes from ``sock``; ConnectionError(closed_message) if it closes first."""
    chunks = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError(closed_message)
        chunks.append(chunk)
        n -= len(chunk)
    return b''.join(chunks)


def mac(secret, *parts):
    return hmac.new(secret, b''.join(parts), hashlib.sha256).digest()
