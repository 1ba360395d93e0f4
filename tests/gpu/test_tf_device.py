"""TensorFlow's "GPU" device over the CUDA stand-in (tests/gpu/tf_device): TF's own copies run on
stand-in streams into stand-in device memory, under its ordering checker.

Each scenario of tf_device_worker.py runs in a subprocess of its own (bounded by a timeout), so
that its stderr, where the stand-in prints every error it detects, can be checked. Skipped, with
the reason, without TensorFlow or when the stand-in cannot be built (no CUDA headers).
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

if importlib.util.find_spec('tensorflow') is None:
    pytest.skip('TensorFlow is not installed: the stand-in GPU device is a TensorFlow plugin',
                allow_module_level=True)

import tf_standin_gpu  # noqa: E402

CUDA_ERROR_LAUNCH_FAILURE = 719
WORKER_TIMEOUT = 180
STANDIN_LINE = 'hvd-cuda-standin:'
PLUGIN_LINE = 'hvd-tf-standin-gpu:'


@pytest.fixture(scope='module')
def libraries():
    try:
        standin = tf_standin_gpu.standin_path()
    except RuntimeError as e:
        pytest.skip('the CUDA stand-in cannot be built here: %s' % str(e).splitlines()[0])
    return standin, tf_standin_gpu.plugin_path()


def run_worker(scenario, standin):
    env = dict(os.environ, HOROVOD_CUDA_LIBRARY=standin, HOROVOD_NCCL_LIBRARY=standin, HVD_STANDIN_DEVICES='2')
    proc = subprocess.run([sys.executable, os.path.join(HERE, 'tf_device_worker.py'), scenario],
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT, env=env)
    assert proc.returncode == 0, 'worker %s failed (rc %d):\n%s' % (scenario, proc.returncode, proc.stderr[-6000:])
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture(scope='module')
def roundtrip(libraries):
    return run_worker('roundtrip', libraries[0])


@pytest.fixture(scope='module')
def race(libraries):
    return run_worker('race', libraries[0])


@pytest.fixture(scope='module')
def kernel_race(libraries):
    return run_worker('kernel_race', libraries[0])


def test_one_gpu_device_per_standin_device(roundtrip):
    assert roundtrip[0]['devices'] == ['/device:GPU:0', '/device:GPU:1']


CASES = ['float32', 'float16', 'bfloat16', 'int32', 'int64', 'bool', 'scalar', 'empty', '64MiB']


@pytest.mark.parametrize('mode', ['eager', 'function'])
@pytest.mark.parametrize('case', CASES)
def test_round_trip_through_the_gpu_keeps_the_values(roundtrip, mode, case):
    result = roundtrip[0][mode + '/' + case]
    assert result['gpu_device'].endswith('/device:GPU:0'), result
    assert result['back_device'].endswith('/device:CPU:0'), result
    assert result['equal'], result
    # One copy in each direction on the stand-in's streams; int32 tensors of a "GPU" device live
    # in host memory (as on TF's CUDA device), and an empty tensor has nothing to copy.
    assert result['copies'] == (0 if case in ('int32', 'empty') else 2), result


@pytest.mark.parametrize('dtype', ['float32', 'float16', 'bfloat16'])
def test_the_plugins_gpu_kernel_scales_eagerly_and_in_a_function(roundtrip, dtype):
    result = roundtrip[0]['scale/' + dtype]
    assert all(d.endswith('/device:GPU:0') for d in result['devices']), result
    assert result['equal'] == [True, True], result


def test_the_plugins_gpu_kernel_runs_on_the_second_gpu(roundtrip):
    result = roundtrip[0]['scale/gpu1']
    assert result['devices'][0].endswith('/device:GPU:1') and result['equal'] == [True], result


def test_copy_between_gpus(roundtrip):
    result = roundtrip[0]['gpu0_to_gpu1']
    assert result['gpu_device'].endswith('/device:GPU:1') and result['equal'], result


def test_op_without_a_gpu_kernel_falls_back_to_the_cpu_under_soft_placement(roundtrip):
    result = roundtrip[0]['soft_placement']
    assert result['device'].endswith('/device:CPU:0') and result['equal'], result


def test_op_without_a_gpu_kernel_is_refused_under_strict_placement(roundtrip):
    result = roundtrip[0]['strict_placement']
    assert result['raised'], result
    assert 'NthElement' in result['message'] and 'enable_soft_placement=0' in result['message'], result


def test_cuda_math_kernels_fail_loudly_or_run_on_the_cpu(roundtrip):
    # A CUDA-built TensorFlow's AddV2 kernel cannot launch on this device: an error, never a value.
    result = roundtrip[0]['cuda_kernel']
    if result['raised']:
        assert 'AddV2' in result['message'], result
    else:
        assert result['device'].endswith('/device:CPU:0') and result['equal'], result


def test_tensorflow_alone_raises_no_standin_error(roundtrip):
    lines = [line for line in roundtrip[1].splitlines() if line.startswith((STANDIN_LINE, PLUGIN_LINE))]
    assert lines == []


def test_a_read_not_ordered_after_tensorflows_copy_is_an_ordering_error(race):
    result, stderr = race
    assert result['streams'] >= 1 and result['gated'] == result['streams'], result
    assert result['racy_status'] == CUDA_ERROR_LAUNCH_FAILURE, result
    errors = [line for line in stderr.splitlines() if line.startswith(STANDIN_LINE)]
    assert len(errors) == 1, errors
    assert 'ordering error: cudaMemcpyAsync(DeviceToHost' in errors[0], errors
    assert "of device 0's allocation" in errors[0] and 'which cudaMemcpyAsync(HostToDevice' in errors[0], errors
    # The memory was the TF tensor's: TF finished its copy once released, with the right values,
    # and the same read, once TF had seen its copy complete, is ordered and reads them.
    assert result['producer_done'] and result['tensor_is_the_copied_memory'] and result['tensor_equal'], result
    assert result['ordered_status'] == 0 and result['ordered_equal'], result


def test_a_read_not_ordered_after_a_tensorflow_kernel_is_an_ordering_error(kernel_race):
    # TF considers a GPU kernel's output ready once the kernel is queued: a consumer must order
    # after TF's compute stream. Ours does not, while that stream is held back.
    result, stderr = kernel_race
    assert result['gated'] == result['streams'] >= 1 and result['kernels_ran'] == 1, result
    assert result['racy_status'] == CUDA_ERROR_LAUNCH_FAILURE, result
    errors = [line for line in stderr.splitlines() if line.startswith(STANDIN_LINE)]
    assert len(errors) == 1, errors
    assert 'ordering error: cudaMemcpyAsync(DeviceToHost' in errors[0] and 'which hvd scale(' in errors[0], errors
    assert result['output_is_the_read_memory'] and result['equal'], result
    assert result['ordered_status'] == 0 and result['ordered_equal'], result


def run_python(code, env):
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=WORKER_TIMEOUT,
                          env=env, cwd=HERE)


def test_plugin_without_horovod_cuda_library_fails_naming_it(libraries):
    env = {k: v for k, v in os.environ.items() if k != 'HOROVOD_CUDA_LIBRARY'}
    proc = run_python('from tensorflow.python.framework import load_library\n'
                      'load_library.load_pluggable_device_library(%r)\n' % libraries[1], env)
    # TensorFlow makes a plugin that fails SE_InitPlugin a fatal error, with the plugin's message.
    assert proc.returncode != 0
    assert 'HOROVOD_CUDA_LIBRARY is not set' in proc.stderr, proc.stderr[-3000:]


def test_load_after_tensorflow_initialized_its_devices_fails(libraries):
    env = dict(os.environ, HOROVOD_CUDA_LIBRARY=libraries[0], HOROVOD_NCCL_LIBRARY=libraries[0])
    proc = run_python('import tensorflow as tf\n'
                      'tf.constant(1.0) + 1.0\n'
                      'import tf_standin_gpu\n'
                      'tf_standin_gpu.load()\n', env)
    assert proc.returncode != 0
    assert 'load() must run before TensorFlow initializes its devices' in proc.stderr, proc.stderr[-3000:]
