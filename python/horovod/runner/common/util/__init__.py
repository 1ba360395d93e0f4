"""Horovod's ``horovod.runner.common.util`` package path, kept for user code that imports from it."""
