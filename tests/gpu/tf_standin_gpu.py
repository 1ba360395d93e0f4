"""TensorFlow with a "GPU" device over the CUDA stand-in (tests/gpu/tf_device/README.md).

    import tf_standin_gpu
    gpus = tf_standin_gpu.load()      # before TensorFlow runs any op
    # ['/device:GPU:0', '/device:GPU:1'] (one per HVD_STANDIN_DEVICES, default 2)

load() points HOROVOD_CUDA_LIBRARY and HOROVOD_NCCL_LIBRARY at the stand-in when they are unset
(building it if needed), builds the plugin for the installed TensorFlow, loads it with
load_pluggable_device_library and returns the GPU devices' names. TensorFlow's GPU tensors are
then stand-in device memory, its copies run on stand-in streams, and Horovod, loading the same
HOROVOD_CUDA_LIBRARY, shares that one stand-in (and its ordering checker) with TensorFlow.
plugin_path() is the plugin library (its hvd_tf_standin_gpu_* test hooks: README.md).

scale(x, factor) runs the plugin's one GPU kernel, HvdStandinGpuScale (x * factor, float types):
a TensorFlow GPU op whose output is written on TensorFlow's compute stream and ordered by that
stream only, unlike TensorFlow's copies, which it waits for on the host before their consumers
run. It is the producer to use when a test must catch a consumer that does not order after
TensorFlow's streams.
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))

_loaded = None


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def standin_path():
    """The CUDA stand-in library (HOROVOD_TEST_CUDA_STANDIN if set, else built into its cache)."""
    explicit = os.environ.get('HOROVOD_TEST_CUDA_STANDIN')
    if explicit:
        return explicit
    return _load_file('build_standin', os.path.join(HERE, 'standin', 'build_standin.py')).library_path()


def plugin_path():
    """The plugin library, built for the installed TensorFlow if needed."""
    return _load_file('build_tf_device', os.path.join(HERE, 'tf_device', 'build_tf_device.py')).library_path()


def load():
    """Loads the plugin into TensorFlow (once per process) and returns the GPU devices' names.
    Raises RuntimeError when TensorFlow had already initialized its devices (an op ran, or
    tf.config listed devices) before this call, so that the GPU devices did not appear."""
    global _loaded
    if _loaded is not None:
        return list(_loaded)
    if not os.environ.get('HOROVOD_CUDA_LIBRARY'):
        os.environ['HOROVOD_CUDA_LIBRARY'] = standin_path()
    if not os.environ.get('HOROVOD_NCCL_LIBRARY'):
        os.environ['HOROVOD_NCCL_LIBRARY'] = os.environ['HOROVOD_CUDA_LIBRARY']
    path = plugin_path()
    import tensorflow as tf
    from tensorflow.python.framework import load_library
    load_library.load_pluggable_device_library(path)
    names = [d.name for d in tf.config.list_logical_devices('GPU')]
    if not names:
        raise RuntimeError('the stand-in GPU plugin %s loaded, but TensorFlow lists no GPU device: load() must run '
                           'before TensorFlow initializes its devices (before any op or tf.config device call)'
                           % path)
    _loaded = names
    return list(names)


def scale(x, factor):
    """x * factor by the plugin's GPU kernel (eager or inside a tf.function), on the GPU that
    tf.device selects (soft placement picks one: the kernel is GPU-only)."""
    from tensorflow.python.eager import context, execute
    from tensorflow.python.framework import op_def_library
    if _loaded is None:
        raise RuntimeError('tf_standin_gpu.scale: call load() first (the op comes with the plugin)')
    if context.executing_eagerly():
        attrs = ('T', x.dtype.as_datatype_enum, 'factor', float(factor))
        return execute.execute(b'HvdStandinGpuScale', 1, inputs=[x], attrs=attrs, ctx=context.context())[0]
    _, _, op, _ = op_def_library._apply_op_helper('HvdStandinGpuScale', x=x, factor=float(factor))
    return op.outputs[0]
