"""One-line descriptions of a worker's exception for the driver's error messages (Ray, Spark).

An exception raised ``from`` another (``hvd.init()``'s ValueError, whose text only says to look
at the log above) loses its cause when it is pickled back to the driver, and on Ray or Spark the
worker's log is not "above" anything the user sees. ``keep_causes`` records the chain on the
exception itself, where pickling keeps it; ``describe`` shows it."""

__all__ = ['describe', 'keep_causes']


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def keep_causes(error):
    """Stores the first lines of ``error``'s causes (``raise ... from``, or the exception being
    handled) in its ``horovod_causes`` attribute; returns ``error``."""
    causes, seen, cause = [], {id(error)}, error.__cause__ or error.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        causes.append('{}: {}'.format(type(cause).__name__, _first_line(cause)))
        cause = cause.__cause__ or cause.__context__
    if causes:
        try:
            error.horovod_causes = causes
        except AttributeError:  # an exception type without a __dict__
            pass
    return error


def describe(error):
    """``error``'s first line, followed by its recorded causes: "text (caused by T: text)"."""
    if getattr(error, 'horovod_causes', None) is None:
        keep_causes(error)  # raised here, not in a worker: the chain is still there
    causes = getattr(error, 'horovod_causes', None) or []
    return _first_line(error) + ''.join(' (caused by {})'.format(c) for c in causes)
