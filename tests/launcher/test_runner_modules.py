"""The modules of Horovod's runner that user code imports (custom elastic drivers, discovery
classes, thread helpers), used as such code uses them."""

import os
import stat
import sys
import threading

import pytest

from launcher_util import ROOT

sys.path.insert(0, os.path.join(ROOT, 'python'))
from horovod.runner.elastic.discovery import FixedHosts, HostDiscovery, HostDiscoveryScript  # noqa: E402
from horovod.runner.elastic.settings import ElasticSettings  # noqa: E402
from horovod.runner.util.threads import execute_function_multithreaded, in_thread, on_event  # noqa: E402

sys.path.pop(0)


def _script(tmp_path, body):
    path = tmp_path / 'discover.sh'
    path.write_text('#!/bin/sh\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_discovery_script_lines_become_hosts_and_slots(tmp_path):
    script = _script(tmp_path, 'echo host-a:4\necho host-b\necho\necho host-a:2\n')
    assert HostDiscoveryScript(script, 3).find_available_hosts_and_slots() == {'host-a': 2, 'host-b': 3}


def test_discovery_script_reads_the_script_at_every_call(tmp_path):
    hosts = tmp_path / 'hosts'
    hosts.write_text('a:1\n')
    discovery = HostDiscoveryScript(_script(tmp_path, 'cat {}\n'.format(hosts)), 1)
    assert discovery.find_available_hosts_and_slots() == {'a': 1}
    hosts.write_text('a:1\nb:2\n')
    assert discovery.find_available_hosts_and_slots() == {'a': 1, 'b': 2}
    hosts.write_text('')
    assert discovery.find_available_hosts_and_slots() == {}


def test_discovery_script_failures_name_the_script(tmp_path):
    script = _script(tmp_path, 'exit 3\n')
    with pytest.raises(RuntimeError, match='Failed to execute discovery script: {}. Exit code: 3'.format(script)):
        HostDiscoveryScript(script, 1).find_available_hosts_and_slots()
    bad = _script(tmp_path, 'echo host-a:many\n')
    with pytest.raises(ValueError, match="line 1: 'host-a:many' is not host:slots"):
        HostDiscoveryScript(bad, 1).find_available_hosts_and_slots()


def test_fixed_hosts_and_a_custom_discovery():
    fixed = FixedHosts({'a': 2})
    assert fixed.find_available_hosts_and_slots() == {'a': 2}
    fixed.set({'a': 2, 'b': 1})
    assert fixed.find_available_hosts_and_slots() == {'a': 2, 'b': 1}

    class Mine(HostDiscovery):
        def find_available_hosts_and_slots(self):
            return {'mine': 8}

    assert Mine().find_available_hosts_and_slots() == {'mine': 8}
    with pytest.raises(NotImplementedError):
        HostDiscovery().find_available_hosts_and_slots()


def test_elastic_settings_keep_horovods_fields():
    discovery = FixedHosts({'a': 2})
    settings = ElasticSettings(discovery=discovery, min_num_proc=1, max_num_proc=4, elastic_timeout=60,
                               reset_limit=2, cooldown_range=(5, 50), num_proc=2, verbose=1, nics={'eth0'},
                               start_timeout=30)
    assert settings.discovery is discovery and settings.elastic
    assert (settings.min_num_proc, settings.max_num_proc, settings.elastic_timeout, settings.reset_limit,
            settings.cooldown_range) == (1, 4, 60, 2, (5, 50))
    assert (settings.num_proc, settings.verbose, settings.nics) == (2, 1, {'eth0'})
    assert settings.start_timeout_seconds(10) == 30
    with pytest.raises(TypeError):
        ElasticSettings(discovery, 1, 2, 60, 1, no_such_setting=1)


def test_in_thread_runs_the_target_and_checks_args():
    seen = []
    thread = in_thread(seen.append, ('x',), name='worker-x')
    thread.join(10)
    assert seen == ['x'] and thread.daemon and thread.name == 'worker-x'
    with pytest.raises(ValueError, match='args must be a tuple'):
        in_thread(seen.append, ['y'])

    def fails():
        raise RuntimeError('boom')

    errors = []
    previous = threading.excepthook
    threading.excepthook = errors.append
    try:
        in_thread(fails, silent=True).join(10)
        assert errors == []
        in_thread(fails).join(10)
        assert len(errors) == 1 and str(errors[0].exc_value) == 'boom'
    finally:
        threading.excepthook = previous


def test_on_event_calls_only_when_the_event_comes_first():
    event, stop, called = threading.Event(), threading.Event(), []
    thread = on_event(event, called.append, ('fired',), stop=stop, check_stop_interval_s=0.01)
    event.set()
    thread.join(10)
    assert called == ['fired']
    event2, stop2 = threading.Event(), threading.Event()
    thread = on_event(event2, called.append, ('late',), stop=stop2, check_stop_interval_s=0.01)
    stop2.set()
    thread.join(10)
    assert not thread.is_alive() and called == ['fired']


def test_execute_function_multithreaded_returns_results_by_index():
    assert execute_function_multithreaded(lambda a, b: a * b, [(1, 2), (3, 4), (5, 6)],
                                          max_concurrent_executions=2) == {0: 2, 1: 12, 2: 30}
    with pytest.raises(ZeroDivisionError):
        execute_function_multithreaded(lambda a: 1 / a, [(1,), (0,)])
