"""``horovod.run()``: run a Python function on every process of a Horovod job and collect the
results in rank order. The processes are started by the ``horovodrun`` launcher (a C++
executable); this module builds its command line and serves the function and results.
"""

import os
import secrets
import subprocess
import sys
import tempfile
import threading
import warnings

import cloudpickle

from horovod.runner.binary import find_horovodrun
from horovod.runner.task_service import TaskService

__all__ = ['run']


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None):
    """Runs ``func(*args, **kwargs)`` on ``num_proc`` processes (on ``hosts``/``hostfile``, else
    locally) and returns the list of return values, indexed by rank (elastic jobs: the first
    ``min_num_proc`` results, by the ranks of the last round).

    Raises ValueError for contradictory arguments and RuntimeError when a process fails (with
    Horovod's message naming the first failing process)."""
    if np is not None:
        warnings.warn('np is deprecated, use num_proc instead', DeprecationWarning)
        num_proc = np
    if min_np is not None:
        warnings.warn('min_np is deprecated, use min_num_proc instead', DeprecationWarning)
        min_num_proc = min_np
    if max_np is not None:
        warnings.warn('max_np is deprecated, use max_num_proc instead', DeprecationWarning)
        max_num_proc = max_np
    if network_interface is not None:
        warnings.warn('network_interface is deprecated, use network_interfaces instead', DeprecationWarning)
        network_interfaces = network_interface
    if hosts is not None and hostfile is not None:
        raise ValueError('Argument hosts and hostfile only allow one provided.')
    if use_gloo and use_mpi:
        raise ValueError('Argument use_gloo and use_mpi only allow one set True.')
    kwargs = {} if kwargs is None else kwargs

    flags = ['-np', str(num_proc)]
    if min_num_proc is not None:
        flags += ['--min-np', str(min_num_proc)]
    if max_num_proc is not None:
        flags += ['--max-np', str(max_num_proc)]
    if slots is not None:
        flags += ['--slots-per-host', str(slots)]
    if reset_limit is not None:
        flags += ['--reset-limit', str(reset_limit)]
    if cooldown_range is not None:
        low, high = cooldown_range
        flags += ['--blacklist-cooldown-range', str(low), str(high)]
    if hosts is not None:
        flags += ['-H', hosts]
    if hostfile is not None:
        flags += ['--hostfile', hostfile]
    if host_discovery_script is not None:
        flags += ['--host-discovery-script', host_discovery_script]
    if start_timeout is not None:
        flags += ['--start-timeout', str(start_timeout)]
    if ssh_port is not None:
        flags += ['-p', str(ssh_port)]
    if ssh_identity_file is not None:
        flags += ['-i', ssh_identity_file]
    if disable_cache:
        flags.append('--disable-cache')
    if output_filename is not None:
        flags += ['--output-filename', output_filename]
    if verbose:
        flags.append('--verbose')
    if use_gloo:
        flags.append('--gloo')
    if use_mpi:
        flags.append('--mpi')
    if mpi_args is not None:
        flags.append('--mpi-args=' + mpi_args)
    if network_interfaces is not None:
        nics = network_interfaces if isinstance(network_interfaces, str) else ','.join(network_interfaces)
        flags += ['--network-interfaces', nics]

    # Elastic jobs end with at least min_num_proc workers: their results, by final rank.
    expected = num_proc if min_num_proc is None and host_discovery_script is None else (min_num_proc or 1)
    return _launch(func, args, kwargs, flags, expected, executable or sys.executable, use_mpi)


def _launch(func, args, kwargs, flags, num_proc, executable, use_mpi):
    secret = secrets.token_hex(32)
    service = TaskService(secret, cloudpickle.dumps((func, args, kwargs)))
    try:
        with tempfile.TemporaryDirectory(prefix='horovod-run-') as tmp:
            status_file = os.path.join(tmp, 'status')
            command = [find_horovodrun()] + flags + ['--status-file', status_file,
                                                     executable, '-m', 'horovod.runner.run_task', '-',
                                                     str(service.port)]
            env = dict(os.environ)
            env['_HOROVOD_SECRET_KEY'] = secret
            env['PYTHONPATH'] = _worker_pythonpath(tmp, env.get('PYTHONPATH'))
            exit_code = _run_forwarding_output(command, env)
            if exit_code != 0:
                if use_mpi:
                    raise RuntimeError('mpirun failed with exit code {exit_code}'.format(exit_code=exit_code))
                message = ''
                if os.path.exists(status_file):
                    with open(status_file) as f:
                        message = f.read()
                raise RuntimeError(message or 'horovodrun failed with exit code {}'.format(exit_code))
        results = service.results()
    finally:
        service.shutdown()
    missing = [r for r in range(num_proc) if r not in results]
    if missing:
        raise RuntimeError('Horovod job finished but ranks {} returned no result'.format(missing))
    return [cloudpickle.loads(results[r]) for r in range(num_proc)]


def _worker_pythonpath(tmp, pythonpath):
    """PYTHONPATH for the workers: they must import this very horovod package, wherever the
    driver found it (an installed wheel, a source tree, a path added at run time).

    Neither the package directory nor its parent may go on the path: the package directory
    holds ``torch/`` (so ``import torch`` in the user's function would find horovod.torch), and
    the parent may be a site-packages directory, which on PYTHONPATH would come before the
    standard library. Instead a directory inside ``tmp`` gets one entry, a ``horovod`` link to
    this package, so exactly one top-level name resolves there. On other hosts the directory
    does not exist and Python skips it, so their own installation is used."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shim = os.path.join(tmp, 'pythonpath')
    os.mkdir(shim)
    os.symlink(package_dir, os.path.join(shim, 'horovod'), target_is_directory=True)
    return shim + (os.pathsep + pythonpath if pythonpath else '')


def _fileno(stream):
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _run_forwarding_output(command, env):
    """Runs the launcher. Its output goes straight to our stdout/stderr when they are real files;
    otherwise (e.g. Jupyter) it is copied into sys.stdout/sys.stderr line by line."""
    out_fd, err_fd = _fileno(sys.stdout), _fileno(sys.stderr)
    if out_fd is not None and err_fd is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        proc = subprocess.Popen(command, env=env, stdout=out_fd, stderr=err_fd)
        return _wait(proc)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def pump(src, dst):
        for line in iter(src.readline, b''):
            dst.write(line.decode('utf-8', errors='replace'))
            dst.flush()

    threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in threads:
        t.start()
    code = _wait(proc)
    for t in threads:
        t.join()
    return code


def _wait(proc):
    try:
        return proc.wait()
    except BaseException:
        # Ctrl-C at a terminal reached horovodrun too (same process group); give it a moment to
        # stop the workers before asking it ourselves.
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
