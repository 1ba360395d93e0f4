"""Helpers shared by the launcher tests."""

import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pgrep(pattern):
    out = subprocess.run(['pgrep', '-f', pattern], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def kill_leftovers(pattern):
    for pid in pgrep(pattern):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
