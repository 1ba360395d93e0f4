"""Horovod's ``horovod.runner.util`` package path, kept for user code that imports from it."""
