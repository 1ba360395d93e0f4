#!/usr/bin/env python3
"""A connection flood against one listening socket, as a hostile local process would send it.

    python3 bench/flood_hammer.py HOST PORT --seconds 5 [--procs 2] [--holders 200] [--rate 0]

Each of --procs processes first opens --holders connections and keeps them open and idle until
the end (each connect completed before the next, so that they reach the server before the flood
fills its accept queue), then opens connections as fast as it can (or --rate a second in all,
when given) and sends nothing: each of these is reset at once (SO_LINGER 0, so the flood does not
run out of local ports through TIME_WAIT). Stops after --seconds, or at once when the file
--stop-file appears. Prints one line: "flood: <connections> connections in <s> s (<rate>/s),
<held> held, <failed> failed connects". With --started-file F, process i creates F.i after its
holders and first 200 flood connections (so a caller can wait for the flood to be on).
"""
import argparse
import multiprocessing
import os
import socket
import struct
import sys
import time

LINGER_RESET = struct.pack('ii', 1, 0)


def hammer(index, host, port, seconds, holders, rate, stop_file, started_file, counts):
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    held = []
    opened = failed = 0
    while len(held) < holders:
        try:
            held.append(socket.create_connection((host, port), timeout=5))
        except OSError:
            failed += 1
            time.sleep(0.01)
        if stop_file and os.path.exists(stop_file):
            break
    start = time.monotonic()
    end = start + seconds
    while True:
        now = time.monotonic()
        if now >= end or (opened % 256 == 0 and stop_file and os.path.exists(stop_file)):
            break
        if rate > 0 and opened > rate * (now - start):
            time.sleep(0.001)
            continue
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((host, port))
        if err not in (0, 115):  # EINPROGRESS
            failed += 1
            s.close()
            time.sleep(0.001)
            continue
        opened += 1
        if opened == 200 and started_file:
            with open('{}.{}'.format(started_file, index), 'w'):
                pass
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
        s.close()
    for s in held:
        s.close()
    counts.put((opened + len(held), len(held), failed, time.monotonic() - start))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('host')
    ap.add_argument('port', type=int)
    ap.add_argument('--seconds', type=float, default=5.0)
    ap.add_argument('--procs', type=int, default=2)
    ap.add_argument('--holders', type=int, default=100, help='idle connections kept open, per process')
    ap.add_argument('--rate', type=float, default=0, help='connections a second in all (0: as fast as possible)')
    ap.add_argument('--stop-file', default='')
    ap.add_argument('--started-file', default='')
    args = ap.parse_args()
    counts = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=hammer, args=(i, args.host, args.port, args.seconds, args.holders,
                                                          args.rate / args.procs, args.stop_file,
                                                          args.started_file, counts))
             for i in range(args.procs)]
    for p in procs:
        p.start()
    results = [counts.get() for _ in procs]
    for p in procs:
        p.join()
    opened = sum(r[0] for r in results)
    seconds = max(r[3] for r in results)
    print('flood: {} connections in {:.1f} s ({:.0f}/s), {} held, {} failed connects'.format(
        opened, seconds, opened / seconds if seconds else 0, sum(r[1] for r in results), sum(r[2] for r in results)),
          flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
