"""Small framework-neutral helpers."""

import os
import warnings

from horovod.common.exceptions import HorovodVersionMismatchError, get_version_mismatch_message

NOT_INITIALIZED_MESSAGE = 'Horovod has not been initialized; use hvd.init().'


def env_bool(name, default=False):
    """The core's boolean parsing (cpp/common/params.cc), so Python and C++ agree: integers are
    true when > 0 (as Horovod), and true/yes/on, false/no/off are accepted in any case. Other
    values count as false here; hvd.init() rejects them with a message naming the variable."""
    value = os.environ.get(name)
    if value is None or value.strip() == '':
        return default
    word = value.strip().lower()
    if word in ('true', 'yes', 'on'):
        return True
    if word in ('false', 'no', 'off'):
        return False
    return env_int_value(value) > 0


def env_int_value(value):
    value = value.strip()
    digits = ''
    for i, ch in enumerate(value):
        if ch.isdigit() or (i == 0 and ch in '+-'):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return 0


def env_int(name, default=0):
    value = os.environ.get(name)
    if value is None or value.strip() == '':
        return default
    return env_int_value(value)


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True


def split_list(items, num_parts):
    """Splits ``items`` into ``num_parts`` contiguous, nearly equal parts (first ones larger)."""
    d, r = divmod(len(items), num_parts)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(num_parts)]


def num_rank_is_power_2(num_rank):
    """True iff ``num_rank`` is a power of two (Adasum's CPU constraint)."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def check_installed_version(name, version, built_version=None):
    """Warns (or raises when HOROVOD_VERSION_MISMATCH_ERROR is set) if a framework version at
    import differs from the one Horovod was built with. Our core never compiles against a
    framework, so without a recorded build version there is nothing to compare."""
    if built_version is None or version == built_version:
        return
    if env_bool('HOROVOD_VERSION_MISMATCH_ERROR'):
        raise HorovodVersionMismatchError(name, version, built_version)
    warnings.warn(get_version_mismatch_message(name, version, built_version))


def get_average_backwards_compatibility_fun(reduce_ops):
    """Returns ``fn(op, average) -> op`` resolving the deprecated ``average=`` argument."""

    def impl(op, average):
        if op is not None:
            if average is not None:
                raise ValueError('The op parameter supersedes average. Please provide only one '
                                 'of them.')
            return op
        if average is not None:
            warnings.warn('Parameter `average` has been replaced with `op` and will be removed '
                          'in v1.0', DeprecationWarning)
            return reduce_ops.Average if average else reduce_ops.Sum
        return reduce_ops.Average

    return impl
