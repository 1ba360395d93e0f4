"""Exceptions raised by Horovod, shared by every framework adapter."""

import enum


class ErrorCode(enum.IntEnum):
    """What went wrong, as the core reports it (hvd::ErrorCode in horovod/errors.h; the values
    mirror it). Exceptions raised by the core carry one as ``code``: test it, not the message."""
    INTERNAL = 0
    INVALID_ARGUMENT = 1
    MISMATCH = 2
    TIMEOUT = 3
    PEER_LOST = 4
    STORE = 5
    REMOVED_FROM_JOB = 6
    ABORTED = 7
    NOT_INITIALIZED = 8


class HorovodInternalError(RuntimeError):
    """A collective failed: a peer died, ranks disagreed about an operation (shape, dtype, op,
    root, ...), or Horovod was shut down. In elastic mode this triggers restore + reset.
    ``code`` is the core's ErrorCode (INTERNAL for one raised by Python code)."""
    code = ErrorCode.INTERNAL


class HorovodPeerLostError(HorovodInternalError):
    """A peer process is gone. ``rank`` is the global rank that was lost (-1 if unknown)."""

    def __init__(self, message='', rank=-1):
        super().__init__(message)
        self.rank = rank


class HorovodRemovedError(HorovodInternalError):
    """An elastic worker's ``init()`` learned that the driver removed it from the job (its host
    left, or the job no longer needs it). ``hvd.init()`` turns it into a quiet exit with status 0."""
    pass


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by ``State.commit()`` / ``check_host_updates()`` when hosts were added or removed.

    ``skip_sync`` is True when hosts were only removed (no new worker needs the state).
    """

    def __init__(self, skip_sync):
        super().__init__()
        self.skip_sync = skip_sync


class HorovodVersionMismatchError(ImportError):
    """The framework version at import differs from the version at build time."""

    def __init__(self, name, version, built_version):
        super().__init__('Framework {} installed with version {} but found version {}.\n'
                         'This can result in unexpected behavior including runtime errors.\n'
                         'Reinstall Horovod using `pip install --no-cache-dir` to build with the '
                         'new version.'.format(name, built_version, version))
        self.name = name
        self.version = version
        self.built_version = built_version


def get_version_mismatch_message(name, version, built_version):
    return ('Framework {} installed with version {} but found version {}.\n'
            'This can result in unexpected behavior including runtime errors.\n'
            'Reinstall Horovod using `pip install --no-cache-dir` to build with the new version.'
            .format(name, built_version, version))
