"""Locating the ``horovodrun`` executable (the C++ launcher)."""

import os
import shutil
import sys

BINARY_ENV = 'HOROVOD_RUN_BINARY'


def find_horovodrun():
    """Returns the path of ``horovodrun``: ``$HOROVOD_RUN_BINARY``, else the one next to the
    running interpreter (a venv's or the wheel's scripts directory), else the first on PATH.
    Raises RuntimeError if there is none."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise RuntimeError('{}={} is not an executable file'.format(BINARY_ENV, explicit))
        return explicit
    candidates = [os.path.join(os.path.dirname(sys.executable), 'horovodrun')]
    scripts = _scripts_dir()
    if scripts:
        candidates.append(os.path.join(scripts, 'horovodrun'))
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which('horovodrun')
    if on_path:
        return on_path
    raise RuntimeError('Could not find the horovodrun executable. Install Horovod (pip install .), put '
                       'horovodrun on PATH, or set {} to its path.'.format(BINARY_ENV))


def _scripts_dir():
    try:
        import sysconfig
        return sysconfig.get_path('scripts')
    except Exception:  # pragma: no cover - exotic interpreters
        return None
