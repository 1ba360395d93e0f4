"""Errors of horovod.tensorflow's collectives: classes that are both Horovod's (``ValueError``,
``HorovodInternalError``) and TensorFlow's (``tf.errors.InvalidArgumentError``,
``FailedPreconditionError``, ``UnknownError``), so code catching either kind keeps working."""

import re

import tensorflow as tf

from horovod.common.exceptions import ErrorCode, HorovodInternalError


class HorovodInvalidArgumentError(ValueError, tf.errors.InvalidArgumentError):
    """A bad call (bad argument, unsupported dtype, unknown process set), found before anything
    was sent."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class HorovodMismatchError(HorovodInternalError, tf.errors.FailedPreconditionError):
    """Ranks disagreed about an operation (shape, dtype, op, root, process set)."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


class HorovodCollectiveError(HorovodInternalError, tf.errors.UnknownError):
    """A collective failed (peer lost, shutdown, transport failure)."""

    def __init__(self, message):
        tf.errors.UnknownError.__init__(self, None, None, message)


def invalid_argument(message):
    return HorovodInvalidArgumentError(message)


# The prefix TensorFlow puts before an eager op's failure message.
_FUNCTION_NODE = re.compile(r'^\{\{function_node [^}]*\}\}\s*')


def translated(e):
    """The Horovod/TensorFlow error class for an exception from the core (ValueError,
    HorovodInternalError) or from a Horovod kernel (tf.errors.OpError)."""
    if isinstance(e, tf.errors.OpError):
        message = _FUNCTION_NODE.sub('', e.message)
        if isinstance(e, tf.errors.InvalidArgumentError):
            return HorovodInvalidArgumentError(message)
        if isinstance(e, tf.errors.FailedPreconditionError):
            return HorovodMismatchError(message)
        return HorovodCollectiveError(message)
    return _translated(e)


def _translated(e):
    message = str(e)
    if isinstance(e, (HorovodInvalidArgumentError, HorovodMismatchError,
                      HorovodCollectiveError)):
        return e
    if isinstance(e, ValueError):
        return HorovodInvalidArgumentError(message)
    if getattr(e, 'code', None) == ErrorCode.MISMATCH:  # the coordinator's negotiation errors
        return HorovodMismatchError(message)
    return HorovodCollectiveError(message)
