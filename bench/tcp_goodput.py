#!/usr/bin/env python3
"""Single-stream TCP goodput between two addresses (a stand-in for iperf3 -P 1).

    tcp_goodput.py server --bind ADDR --port PORT      # prints "goodput_Bps <bytes/s>" and exits
    tcp_goodput.py client --host ADDR --port PORT [--seconds S]

The server accepts one connection, counts the bytes until the client closes, and reports them
over the time from the first byte to the end of the stream. The client sends 1 MiB writes for
S seconds. Both sides give up after a deadline, so a broken link fails instead of hanging.
"""
import argparse
import socket
import sys
import time


def server(args):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((args.bind, args.port))
        listener.listen(1)
        listener.settimeout(args.deadline)
        print("listening", flush=True)
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(args.deadline)
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            total, first = 0, None
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                if first is None:
                    first = time.perf_counter()
                total += n
            elapsed = time.perf_counter() - (first or time.perf_counter())
    rate = total / elapsed if elapsed > 0 else 0.0
    print(f"goodput_Bps {rate:.0f} bytes {total} seconds {elapsed:.3f}", flush=True)


def client(args):
    payload = b"\x5a" * (1 << 20)
    deadline = time.monotonic() + args.deadline
    while True:  # the server may still be starting
        try:
            sock = socket.create_connection((args.host, args.port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.settimeout(args.deadline)
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)  # wait for the server to close: every byte was received


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("server")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--deadline", type=float, default=60)
    c = sub.add_parser("client")
    c.add_argument("--host", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, default=3.0)
    c.add_argument("--deadline", type=float, default=60)
    args = p.parse_args()
    server(args) if args.mode == "server" else client(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
