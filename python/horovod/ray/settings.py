"""Settings of a ``RayExecutor`` job (``RayExecutor.create_settings``)."""

import os

__all__ = ['RaySettings', 'create_settings']


class RaySettings:
    """What ``RayExecutor`` needs beyond the worker counts.

    timeout_s: seconds for the workers to come up and for Horovod's rendezvous and each blocking
        transfer step (``HOROVOD_GLOO_TIMEOUT_SECONDS`` in the workers).
    placement_group_timeout_s: seconds to wait for Ray to reserve the workers' resources.
    nics: network interfaces for Horovod's TCP connections; the first becomes
        ``HOROVOD_GLOO_IFACE`` in every worker (it must exist on every node).
    ssh_identity_file / ssh_str: kept for Horovod compatibility. Ray starts the workers, so no
        ssh connection is made; ``ssh_str`` is written to ``ssh_identity_file`` (mode 600) if
        that file does not exist yet, as Horovod does.
    """

    def __init__(self, timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                 nics=None):
        if timeout_s is None or timeout_s <= 0:
            raise ValueError('timeout_s must be a positive number of seconds, got {!r}'.format(timeout_s))
        if placement_group_timeout_s is None or placement_group_timeout_s <= 0:
            raise ValueError('placement_group_timeout_s must be a positive number of seconds, got {!r}'.format(
                placement_group_timeout_s))
        if isinstance(nics, str):
            nics = [nics]
        nics = list(nics) if nics else []
        if any(not isinstance(n, str) or not n for n in nics):
            raise ValueError('nics must be interface names, got {!r}'.format(nics))
        self.timeout_s = timeout_s
        self.placement_group_timeout_s = placement_group_timeout_s
        self.nics = nics
        self.ssh_identity_file = ssh_identity_file
        self.ssh_str = ssh_str

    def worker_environment(self):
        """``HOROVOD_*`` variables these settings give every worker."""
        env = {'HOROVOD_GLOO_TIMEOUT_SECONDS': str(int(max(1, round(self.timeout_s))))}
        if self.nics:
            env['HOROVOD_GLOO_IFACE'] = self.nics[0]
        return env


def create_settings(timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100, nics=None):
    """Builds the settings object that ``RayExecutor`` takes (see RaySettings)."""
    if ssh_str is not None:
        if ssh_identity_file is None:
            raise ValueError('ssh_str needs ssh_identity_file: the file to write the key to')
        if not os.path.exists(ssh_identity_file):
            fd = os.open(ssh_identity_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, 'w') as f:
                f.write(ssh_str)
    return RaySettings(timeout_s=timeout_s, ssh_identity_file=ssh_identity_file, ssh_str=ssh_str,
                       placement_group_timeout_s=placement_group_timeout_s, nics=nics)
