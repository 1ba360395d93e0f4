"""Horovod's ``horovod.runner.elastic`` package: the host discovery classes (``discovery``) and
the settings (``settings.ElasticSettings``) that custom elastic drivers build, e.g. for
``ElasticRayExecutor(settings, override_discovery=False)``."""
