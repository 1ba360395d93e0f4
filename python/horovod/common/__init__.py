"""Framework-neutral pieces shared by every adapter.

Kept import-light on purpose: ``horovod.common.exceptions`` must import without the compiled
extension (the extension itself looks the exception classes up there).
"""
