"""Host discovery for elastic jobs: an object whose ``find_available_hosts_and_slots()`` says
which hosts may run workers now and how many each ({host name: slots}). horovodrun's
``--host-discovery-script`` is ``HostDiscoveryScript``; ``ElasticRayExecutor(...,
override_discovery=False)`` and ``RayExecutor(min_workers=..., override_discovery=False)`` ask the
``discovery`` of their settings (docs/ray.md)."""

import subprocess

__all__ = ['FixedHosts', 'HostDiscovery', 'HostDiscoveryScript', 'parse_host_slots']


class HostDiscovery:
    """Base class: subclass it and implement ``find_available_hosts_and_slots``."""

    def find_available_hosts_and_slots(self):
        """{host name: number of slots} of the hosts available now."""
        raise NotImplementedError()


def parse_host_slots(text, default_slots, source):
    """{host: slots} from discovery output: one ``host`` or ``host:slots`` per line; blank lines
    are skipped and a repeated host keeps its last line. A bare host gets ``default_slots``
    (ValueError naming ``source`` if that is None, or if a slot count is not a positive integer)."""
    hosts = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        host, sep, slots = line.partition(':')
        if not sep:
            if default_slots is None:
                raise ValueError('{}, line {}: {!r} has no slot count (host:slots) and no default slots were '
                                 'given'.format(source, number, line))
            hosts[host] = int(default_slots)
            continue
        try:
            count = int(slots)
        except ValueError:
            count = 0
        if not host or count < 1:
            raise ValueError('{}, line {}: {!r} is not host:slots with a positive slot count'.format(
                source, number, line))
        hosts[host] = count
    return hosts


class HostDiscoveryScript(HostDiscovery):
    """Runs ``discovery_script`` (a shell command line) at each call and parses what it prints:
    one ``host`` or ``host:slots`` per line; a bare host gets ``slots``. A non-zero exit raises
    RuntimeError ('Failed to execute discovery script: <script>. Exit code: <code>')."""

    def __init__(self, discovery_script, slots):
        super().__init__()
        self._discovery_script = discovery_script
        self._default_slots = slots

    def find_available_hosts_and_slots(self):
        done = subprocess.run(self._discovery_script, shell=True, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError('Failed to execute discovery script: {}. Exit code: {}'.format(
                self._discovery_script, done.returncode))
        return parse_host_slots(done.stdout, self._default_slots, 'discovery script ' + self._discovery_script)


class FixedHosts(HostDiscovery):
    """The hosts given (``{host: slots}``), until ``set()`` replaces them."""

    def __init__(self, host_slots):
        super().__init__()
        self._host_slots = host_slots

    def find_available_hosts_and_slots(self):
        return self._host_slots

    def set(self, host_slots):
        self._host_slots = host_slots
