"""horovod.runner.rendezvous (the C++ store server and client that horovodrun uses, bound in
horovod._core) against a client written here from the wire format in cpp/store/store_protocol.h
and cpp/common/hmac.h (the real engines use it in test_ray.py and test_spark.py): set/get/add/wait,
blocking get, timeouts naming the missing keys, errors, connections that fail the handshake, the
driver's own store operations and the Python StoreClient."""

import hashlib
import hmac
import os
import socket
import struct
import threading
import time

import pytest

from horovod.runner.rendezvous import RendezvousServer, StoreClient, StoreTimeout

pytestmark = pytest.mark.timeout(60)
SECRET = 'ab' * 32


def recv_exact(sock, n):
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError('closed')
        data += chunk
    return data


def s32(data):
    return struct.pack('<I', len(data)) + data


class Client:
    def __init__(self, port, secret=SECRET, identity=b'horovod-store-client'):
        self.sock = socket.create_connection(('127.0.0.1', port), timeout=10)
        challenge = recv_exact(self.sock, 36)
        assert challenge[:4] == b'HVDA'
        nonce_s, nonce_c = challenge[4:], os.urandom(32)
        mac = hmac.new(secret.encode(), b'client' + nonce_s + identity + nonce_c, hashlib.sha256).digest()
        self.sock.sendall(struct.pack('<H', len(identity)) + identity + nonce_c + mac)
        answer = recv_exact(self.sock, 32)
        expected = hmac.new(secret.encode(), b'server' + nonce_c + nonce_s + b'horovod-store-server',
                            hashlib.sha256).digest()
        assert answer == expected

    def request(self, body):
        self.sock.sendall(struct.pack('<I', len(body)) + body)
        (length,) = struct.unpack('<I', recv_exact(self.sock, 4))
        return recv_exact(self.sock, length)

    def set(self, key, value):
        return self.request(b'\x01' + s32(key) + s32(value))

    def get(self, key, timeout_ms):
        return self.request(b'\x02' + struct.pack('<Q', timeout_ms) + s32(key))

    def add(self, key, delta):
        return self.request(b'\x03' + s32(key) + struct.pack('<q', delta))

    def wait(self, keys, timeout_ms):
        return self.request(b'\x04' + struct.pack('<QI', timeout_ms, len(keys)) + b''.join(s32(k) for k in keys))


@pytest.fixture
def server():
    srv = RendezvousServer(SECRET, '127.0.0.1')
    yield srv
    srv.shutdown()


def test_set_get_add_wait(server):
    c = Client(server.port)
    assert c.set(b'k', b'v\x00x') == b'\x00'
    assert c.get(b'k', 1000) == b'\x00' + s32(b'v\x00x')
    assert c.add(b'n', 2) == b'\x00' + struct.pack('<q', 2)
    assert c.add(b'n', -5) == b'\x00' + struct.pack('<q', -3)
    assert c.get(b'n', 1000) == b'\x00' + s32(b'-3')
    assert c.wait([b'k', b'n'], 1000) == b'\x00'


def test_get_blocks_until_another_client_sets(server):
    waiter, setter = Client(server.port), Client(server.port)
    threading.Timer(0.3, lambda: setter.set(b'late', b'1')).start()
    started = time.monotonic()
    assert waiter.get(b'late', 10000) == b'\x00' + s32(b'1')
    assert 0.2 < time.monotonic() - started < 5


def test_timeout_names_missing_keys(server):
    c = Client(server.port)
    c.set(b'here', b'1')
    reply = c.wait([b'here', b'absent'], 200)
    assert reply == b'\x01' + struct.pack('<I', 1) + s32(b'absent')


def test_errors(server):
    c = Client(server.port)
    c.set(b'text', b'abc')
    reply = c.add(b'text', 1)
    assert reply[0] == 2 and b"whose value is not an integer" in reply
    assert c.request(b'\x09') == b'\x02' + s32(b'unknown request 9')
    assert c.request(b'\x01\x05') == b'\x02' + s32(b'malformed set request')


@pytest.mark.parametrize('secret, identity', [('cd' * 32, b'horovod-store-client'), (SECRET, b'someone-else')])
def test_wrong_secret_or_identity_is_refused(server, secret, identity):
    with pytest.raises((ConnectionError, OSError)):
        Client(server.port, secret=secret, identity=identity)
    assert server.refused == 1


def _closed_by_server(sock):
    """True once the server has closed `sock` (the challenge bytes are read and dropped)."""
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_unauthenticated_flood_is_capped_and_logged_briefly(server, capfd):
    flood = [socket.create_connection(('127.0.0.1', server.port), timeout=10) for _ in range(400)]
    try:
        deadline = time.monotonic() + 10
        closed = 0
        while time.monotonic() < deadline:
            closed = sum(1 for s in flood if _closed_by_server(s))
            if closed >= 400 - 256:
                break
            time.sleep(0.05)
        assert closed >= 400 - 256
        c = Client(server.port)  # a real client is still served while the flood holds its slots
        assert c.set(b'k', b'v') == b'\x00'
        refusals = [line for line in capfd.readouterr().err.splitlines() if 'refused a connection from' in line]
        assert len(refusals) <= 5
        assert server.refused >= 400 - 256
    finally:
        for s in flood:
            s.close()


def test_silent_connection_is_dropped_after_the_handshake_deadline(server):
    s = socket.create_connection(('127.0.0.1', server.port), timeout=20)
    started = time.monotonic()
    recv_exact(s, 36)  # the challenge
    assert s.recv(1) == b''  # then nothing until the server hangs up
    assert time.monotonic() - started < 8
    assert server.refused == 1


def test_python_store_client(server):
    with StoreClient('127.0.0.1', server.port, SECRET) as client:
        client.set('a/b', b'\x00value')
        assert client.get('a/b', 1) == b'\x00value'
        assert client.add('n', 3) == 3 and client.add('n', -1) == 2
        threading.Timer(0.3, lambda: Client(server.port).set(b'later', b'x')).start()
        assert client.get('later', 10) == b'x'
        started = time.monotonic()
        with pytest.raises(StoreTimeout, match="key 'never' did not appear .* within 0 s"):
            client.get('never', 0.2)
        assert 0.15 < time.monotonic() - started < 5
    with pytest.raises(ConnectionError, match='refused the job secret'):
        StoreClient('127.0.0.1', server.port, 'cd' * 32)


def test_driver_side_store_operations(server):
    store = server.store
    assert store.try_get('absent') is None
    assert store.add('counter', 0) == 0
    Client(server.port).add(b'counter', 4)
    assert store.add('counter', 0) == 4 and store.add('counter', 1) == 5
    store.set('elastic/assign/0/0', b'join 0 0 1 0 1 0 1 0')
    assert Client(server.port).get(b'elastic/assign/0/0', 1000) == b'\x00' + s32(b'join 0 0 1 0 1 0 1 0')
    Client(server.port).set(b'spark/host/0', b'\x00bytes')
    assert store.try_get('spark/host/0') == b'\x00bytes'
    store.set('text', b'abc')
    with pytest.raises(ConnectionError, match='not an integer'):
        store.add('text', 1)


def test_shutdown_is_idempotent_and_ends_parked_requests():
    srv = RendezvousServer(SECRET, '127.0.0.1')
    c = Client(srv.port)
    answer = []
    t = threading.Thread(target=lambda: answer.append(_request_or_closed(c, b'\x02' + struct.pack('<Q', 60000)
                                                                        + s32(b'never'))))
    t.start()
    time.sleep(0.2)
    srv.shutdown()
    srv.shutdown()
    t.join(10)
    assert not t.is_alive() and answer == ['closed']
    with pytest.raises(ConnectionError):
        srv.store.set('k', b'v')


def _request_or_closed(client, body):
    try:
        return client.request(body)
    except (ConnectionError, OSError):
        return 'closed'


def test_port_in_use_is_an_os_error(server):
    with pytest.raises(OSError, match=str(server.port)):
        RendezvousServer(SECRET, '127.0.0.1', server.port)


def test_store_client_cannot_reach_a_server():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConnectionError, match='could not connect'):
        StoreClient('127.0.0.1', port, SECRET, connect_timeout_s=0.5)
    assert time.monotonic() - started < 10


def test_serves_and_shuts_down_through_a_connection_flood(tmp_path):
    # The server Ray and Spark drivers run, flooded (bench/flood_hammer.py: 2 processes, 100 idle
    # connections each, the rest reset at once): a client keeps working, shutdown returns while
    # the flood goes on, and this process's descriptors stay within the 256 handshakes' bound.
    import subprocess
    import sys
    hammer = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'bench',
                          'flood_hammer.py')
    server = RendezvousServer(SECRET, '127.0.0.1')
    started, stop = str(tmp_path / 'started'), str(tmp_path / 'stop')
    flood = subprocess.Popen([sys.executable, hammer, '127.0.0.1', str(server.port), '--seconds', '50', '--procs',
                              '2', '--holders', '100', '--started-file', started, '--stop-file', stop],
                             stdout=subprocess.PIPE, text=True)
    try:
        while not os.path.exists(started + '.0') and flood.poll() is None:
            time.sleep(0.05)
        assert flood.poll() is None
        peak = 0
        with StoreClient('127.0.0.1', server.port, SECRET) as client:
            i, until = 0, time.time() + 2  # about 2 s of requests through the flood
            while i < 50 or time.time() < until:
                i += 1
                client.set('k{}'.format(i), b'v')
                assert client.get('k{}'.format(i), timeout_s=30) == b'v'
                peak = max(peak, len(os.listdir('/proc/self/fd')))
        server.shutdown()
        assert flood.poll() is None, 'the flood ended before the shutdown returned'
    finally:
        open(stop, 'w').close()
        stats = flood.communicate(timeout=60)[0]
    assert peak <= 256 + 64, (peak, stats)
