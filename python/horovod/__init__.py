"""Horovod: distributed training with a C++ core.

Framework adapters live in sub-packages (``horovod.torch``, ...); ``horovod.run`` drives the
``horovodrun`` launcher when the runner package is installed.
"""

__version__ = '0.28.1'

try:
    from horovod.runner import run  # noqa: F401
except ImportError:  # the launcher's Python package is optional for the core API
    pass
