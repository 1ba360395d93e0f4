"""``ElasticSettings``: the settings of an elastic job, as Horovod's runner builds them (custom
elastic drivers and ``ElasticRayExecutor.create_settings`` return one)."""

from horovod.runner.common.util.settings import BaseSettings

__all__ = ['ElasticSettings']


class ElasticSettings(BaseSettings):
    """``discovery``: a HostDiscovery (horovod.runner.elastic.discovery) or None (the framework
    finds the hosts, as Ray does by default); ``min_num_proc`` / ``max_num_proc``: bounds on the
    number of workers; ``elastic_timeout``: seconds to wait for ``min_num_proc`` workers after a
    change; ``reset_limit``: resets before the job fails (None: unlimited); ``cooldown_range``:
    (min, max) seconds a host whose worker failed is left out (None: never). Other keywords are
    BaseSettings'."""

    def __init__(self, discovery, min_num_proc, max_num_proc, elastic_timeout, reset_limit, cooldown_range=None,
                 **kwargs):
        super().__init__(elastic=True, **kwargs)
        self.discovery = discovery
        self.min_num_proc = min_num_proc
        self.max_num_proc = max_num_proc
        self.elastic_timeout = elastic_timeout
        self.reset_limit = reset_limit
        self.cooldown_range = cooldown_range

