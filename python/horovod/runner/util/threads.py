"""Thread helpers of Horovod's runner that user code imports (``in_thread`` and friends)."""

import queue
import threading

__all__ = ['execute_function_multithreaded', 'in_thread', 'on_event']


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts ``target(*args)`` in a new thread and returns the thread. ``daemon``: the thread does
    not keep the interpreter alive. ``silent``: an exception ``target`` raises ends the thread
    quietly instead of being printed. ``args`` must be a tuple (ValueError otherwise)."""
    if not isinstance(args, tuple):
        raise ValueError('args must be a tuple, not {}, for a single argument use (arg,)'.format(type(args)))
    body = target
    if silent:
        def body(*call_args):
            try:
                target(*call_args)
            except BaseException:  # silent: the caller asked not to hear about it
                pass
    thread = threading.Thread(target=body, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def on_event(event, func, args=(), stop=None, check_stop_interval_s=1.0, silent=False):
    """In a new daemon thread, waits for ``event`` (a threading.Event) and then calls
    ``func(*args)``; when ``stop`` (an Event) is set first, ``func`` is not called. The stop
    event is looked at every ``check_stop_interval_s`` seconds. Returns the thread."""
    if not isinstance(args, tuple):
        raise ValueError('args must be a tuple, not {}, for a single argument use (arg,)'.format(type(args)))
    if stop is None:
        def wait_then_call():
            event.wait()
            func(*args)
    else:
        def wait_then_call():
            while not event.wait(check_stop_interval_s):
                if stop.is_set():
                    return
            if not stop.is_set():
                func(*args)
    return in_thread(wait_then_call, silent=silent)


def execute_function_multithreaded(fn, args_list, block_until_all_done=True, max_concurrent_executions=1000):
    """Calls ``fn(*args)`` for each tuple of ``args_list`` on up to ``max_concurrent_executions``
    threads. Blocking (the default): returns {index in args_list: return value}; otherwise the
    calls continue in the background and None is returned. An exception of a call propagates
    from this function once all calls ended (blocking mode)."""
    work = queue.Queue()
    for index, args in enumerate(args_list):
        work.put((index, args))
    results = {}
    errors = []
    lock = threading.Lock()

    def worker():
        while True:
            try:
                index, args = work.get_nowait()
            except queue.Empty:
                return
            try:
                value = fn(*args)
                with lock:
                    results[index] = value
            except BaseException as e:
                with lock:
                    errors.append(e)

    threads = [in_thread(worker) for _ in range(max(1, min(max_concurrent_executions, len(args_list))))]
    if not block_until_all_done:
        return None
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
