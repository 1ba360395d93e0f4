"""Small framework-neutral helpers, and Horovod's build queries (``mpi_built()``, ...,
``extension_available()``, ``check_extension()``).

Horovod built one compiled extension per framework and answered these queries by loading each
in a child process. Here one framework-neutral extension, ``horovod._core``, serves every
framework: the "extension" for a framework (``'torch'``, ``'tensorflow'``, ``'mxnet'``) is
available when ``horovod._core``, the framework and Horovod's adapter for it all import.
"""

import contextlib
import functools
import importlib.util
import os
import subprocess
import sys
import sysconfig
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


def check_installed_version(framework, framework_version, exception=None, built_version=None):
    """Horovod's check that ``framework`` at ``framework_version`` (the version imported now) is
    the version the extension was compiled against: a mismatch warns, or raises
    HorovodVersionMismatchError when HOROVOD_VERSION_MISMATCH_ERROR is set or when
    ``exception`` (the error loading the extension raised) is given.

    The core never compiles against a framework, so no build version is recorded and, unless a
    caller passes ``built_version``, there is nothing to compare: every version is accepted."""
    if built_version is None or framework_version == built_version:
        return
    if exception is not None:
        raise HorovodVersionMismatchError(framework, framework_version, built_version) from exception
    if env_bool('HOROVOD_VERSION_MISMATCH_ERROR'):
        raise HorovodVersionMismatchError(framework, framework_version, built_version)
    warnings.warn(get_version_mismatch_message(framework, framework_version, built_version))


@contextlib.contextmanager
def env(**kwargs):
    """Sets the given environment variables for the duration of the ``with`` block and restores
    the previous values (or removes the variables) afterwards. None values are ignored."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    backup = {k: os.environ.get(k) for k in kwargs}
    for k, v in kwargs.items():
        os.environ[k] = v
    try:
        yield
    finally:
        for k, old in backup.items():
            if old is not None:
                os.environ[k] = old
            else:
                os.environ.pop(k, None)


def is_version_greater_equal_than(ver, target):
    """True iff version string ``ver`` >= ``target`` (``target`` in major.minor.patch form)."""
    if any(not isinstance(_str, str) for _str in (ver, target)):
        raise ValueError("This function only accepts string arguments. \n"
                         "Received:\n"
                         "\t- ver (type {type_ver}: {val_ver})"
                         "\t- target (type {type_target}: {val_target})".format(
                             type_ver=type(ver), val_ver=ver,
                             type_target=type(target), val_target=target))
    if len(target.split('.')) != 3:
        raise ValueError('We only accepts target version values in the form of: '
                         'major.minor.patch. Received: {}'.format(target))
    from packaging import version
    return version.parse(ver) >= version.parse(target)


# ---- build queries -------------------------------------------------------------------------------

# The frameworks Horovod had extensions for, by extension base name -> module to import.
EXTENSIONS = {'tensorflow': 'tensorflow', 'torch': 'torch', 'mxnet': 'mxnet'}
_CORE = 'horovod._core'


def get_ext_suffix():
    """The file suffix of compiled extension modules for this interpreter."""
    ext_suffix = sysconfig.get_config_var('EXT_SUFFIX')
    if ext_suffix:
        return ext_suffix
    ext_suffix = sysconfig.get_config_var('SO')
    if ext_suffix:
        return ext_suffix
    return '.so'


def get_extension_full_path(pkg_path, *args):
    """Horovod's path of an extension library: ``args[:-1]`` are folders under
    ``dirname(pkg_path)``, ``args[-1]`` the library name without suffix."""
    assert len(args) >= 1
    dir_path = os.path.join(os.path.dirname(pkg_path), *args[:-1])
    return os.path.join(dir_path, args[-1] + get_ext_suffix())


def _core_found():
    try:
        return importlib.util.find_spec(_CORE) is not None
    except (ImportError, ValueError):
        return False


def check_extension(ext_name, ext_env_var, pkg_path, *args):
    """Raises ImportError (Horovod's message) if the compiled extension is missing.

    ``pkg_path`` and ``args`` name a per-framework library in Horovod (``__file__,
    'mpi_lib_v2'``); such a file counts if it exists, but the extension of this build is
    ``horovod._core`` for every framework, so its presence is what is checked."""
    if args and os.path.exists(get_extension_full_path(pkg_path, *args)):
        return
    if not _core_found():
        raise ImportError(
            'Extension %s has not been built.  If this is not expected, reinstall '
            'Horovod with %s=1 to debug the build error.' % (ext_name, ext_env_var))


# Build queries are memoized: the answer cannot change while the process runs.
_cache = functools.lru_cache(maxsize=None)


def _load_core(verbose=False):
    """horovod._core, or None if it does not import (verbose: the reason goes to stderr)."""
    try:
        return importlib.import_module(_CORE)
    except ImportError as e:
        if verbose:
            sys.stderr.write('{}: {}\n'.format(_CORE, e))
        return None


def _imports_in_child(modules, verbose):
    """Whether a fresh interpreter with this process's sys.path imports all ``modules``.
    A child process, as in Horovod: importing a framework has side effects (threads, devices)
    that a query should not leave behind."""
    code = ('import importlib, sys\n'
            'sys.path[:] = {!r}\n'
            'for name in {!r}:\n'
            '    importlib.import_module(name)\n').format([p for p in sys.path], list(modules))
    out = None if verbose else subprocess.DEVNULL
    try:
        return subprocess.run([sys.executable, '-c', code], stdout=out, stderr=out,
                              timeout=300).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def extension_available(ext_base_name, verbose=False):
    """True iff Horovod can be used with the framework ``ext_base_name`` ('torch',
    'tensorflow', 'mxnet'): horovod._core, the framework and ``horovod.<ext_base_name>``
    import (checked in a child process)."""
    if verbose:
        print('Checking whether extension {} was built.'.format(ext_base_name))
    framework = EXTENSIONS.get(ext_base_name, ext_base_name)
    result = _core_found() and _imports_in_child(
        [_CORE, framework, 'horovod.' + ext_base_name], verbose)
    if verbose:
        print('Extension {} {} built.'.format(ext_base_name, 'was' if result else 'was NOT'))
    return result


@_cache
def gpu_available(ext_base_name, verbose=False):
    """True iff the extension for ``ext_base_name`` is available and the core was built with
    GPU support (CUDA or ROCm)."""
    if verbose:
        print('Checking whether extension {} was running with GPU.'.format(ext_base_name))
    core = _load_core(verbose)
    result = bool(core is not None and (core.cuda_built() or core.rocm_built())
                  and extension_available(ext_base_name))
    if verbose:
        print('Extension {} {} running with GPU.'.format(ext_base_name,
                                                         'was' if result else 'was NOT'))
    return result


def _built(query, description, verbose, missing_error):
    if verbose:
        print('Checking whether extension {} was {}.'.format(_CORE, description))
    core = _load_core(verbose)
    result = getattr(core, query)() if core is not None else None
    if verbose:
        print('Extension {} {} {}.'.format(_CORE, 'was' if result else 'was NOT', description))
    if result is None:
        if missing_error is None:
            return False
        raise RuntimeError(missing_error)
    return result


@_cache
def mpi_built(verbose=False):
    """True iff the core was built with MPI support (False without the extension)."""
    return bool(_built('mpi_built', 'built with MPI', verbose, None))


@_cache
def gloo_built(verbose=False):
    """True iff the core has the Gloo-named (built-in) controller; RuntimeError without the
    extension."""
    return bool(_built('gloo_built', 'built with Gloo', verbose,
                       'Failed to determine if Horovod was built with Gloo support.'))


@_cache
def nccl_built(verbose=False):
    """The NCCL version code the core was built with, 0 without NCCL; RuntimeError without the
    extension."""
    return int(_built('nccl_built', 'built with NCCL', verbose,
                      'Failed to determine NCCL support from extension.'))


@_cache
def ddl_built(verbose=False):
    """True iff the core was built with DDL; RuntimeError without the extension."""
    return bool(_built('ddl_built', 'built with DDL', verbose,
                       'Failed to determine if DDL support from extension.'))


@_cache
def ccl_built(verbose=False):
    """True iff the core was built with oneCCL; RuntimeError without the extension."""
    return bool(_built('ccl_built', 'built with CCL', verbose,
                       'Failed to determine if CCL support from extension.'))


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
