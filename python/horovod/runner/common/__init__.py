"""Horovod's ``horovod.runner.common`` package path, kept for user code that imports from it."""
