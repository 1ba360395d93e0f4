"""``BaseSettings``: the settings object Horovod's runner passes around, kept with Horovod's
constructor for user code (custom elastic drivers) that builds one."""

__all__ = ['BaseSettings']


class BaseSettings:
    """What a launch needs beyond the worker counts, as plain attributes of the same names:
    num_proc, verbose, ssh_port, ssh_identity_file, extra_mpi_args, tcp_flag, binding_args, key,
    start_timeout (seconds, or an object with a ``timeout`` attribute), output_filename,
    run_func, nics (a set of interface names), elastic, prefix_output_with_timestamp."""

    def __init__(self, num_proc=None, verbose=0, ssh_port=None, ssh_identity_file=None, extra_mpi_args=None,
                 tcp_flag=None, binding_args=None, key=None, start_timeout=None, output_filename=None,
                 run_func=None, nics=None, elastic=False, prefix_output_with_timestamp=False):
        self.num_proc = num_proc
        self.verbose = verbose
        self.ssh_port = ssh_port
        self.ssh_identity_file = ssh_identity_file
        self.extra_mpi_args = extra_mpi_args
        self.tcp_flag = tcp_flag
        self.binding_args = binding_args
        self.key = key
        self.start_timeout = start_timeout
        self.output_filename = output_filename
        self.run_func = run_func
        self.nics = nics
        self.elastic = elastic
        self.prefix_output_with_timestamp = prefix_output_with_timestamp

    def start_timeout_seconds(self, default):
        """``start_timeout`` in seconds (``default`` when unset)."""
        value = self.start_timeout
        if value is None:
            return default
        return float(getattr(value, 'timeout', value))
