"""DistributedGradientTape: a ``tf.GradientTape`` whose ``gradient()`` returns gradients averaged
(or summed) over the ranks of a process set.

    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

The wrapper is an instance of a subclass of the tape's own class (same class name) sharing the
recorded tape, so it can be wrapped before or after the ``with`` block. A call to
``gradient()`` reduces its gradients in groups, one crossing into the core per group (see
``horovod.tensorflow.gradients``). Sources registered as local (``register_local_source``, or
the layers given to ``PartialDistributedGradientTape``) keep their own gradient, divided by the
set size when ``scale_local_gradients`` is True.
"""

import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.gradients import (_make_allreduce_grads_fn, check_reduction_args,
                                          scale_local_gradients)
from horovod.tensorflow.mpi_ops import Average
from horovod.tensorflow.util import var_ref


class _DistributedGradientTape(tf.GradientTape):
    # The methods below are copied into a dynamically created subclass of the user's tape class;
    # super(self.__class__, self) is that class.

    def _hvd_setup(self, device_dense, device_sparse, compression, sparse_as_dense, op,
                   gradient_predivide_factor, groups, process_set, scale_local_gradients):
        self._allreduce_grads = _make_allreduce_grads_fn(
            'DistributedGradientTape', device_dense, device_sparse, compression, sparse_as_dense,
            op, gradient_predivide_factor, groups, process_set)
        self._hvd_process_set = process_set
        self._local_sources = set()
        self._scale_local_gradients = scale_local_gradients

    def register_local_source(self, source):
        """Marks ``source`` (a variable) as local to this rank: its gradient is not reduced."""
        self._local_sources.add(var_ref(source))

    def _split_local(self, flat_sources):
        if not self._local_sources:
            return [False] * len(flat_sources)
        return [var_ref(s) in self._local_sources for s in flat_sources]

    def _reduce(self, flat_grads, flat_sources, use_generic_names):
        is_local = self._split_local(flat_sources)
        global_idx = [i for i, local in enumerate(is_local) if not local]
        local_idx = [i for i, local in enumerate(is_local) if local]
        result = list(flat_grads)
        reduced = self._allreduce_grads([flat_grads[i] for i in global_idx],
                                        [flat_sources[i] for i in global_idx],
                                        use_generic_names)
        for i, g in zip(global_idx, reduced):
            result[i] = g
        if local_idx:
            local = [flat_grads[i] for i in local_idx]
            if self._scale_local_gradients:
                local = scale_local_gradients(local, self._hvd_process_set)
            for i, g in zip(local_idx, local):
                result[i] = g
        return result, is_local

    def _raw_gradients(self, target, sources, output_gradients):
        return super(self.__class__, self).gradient(target, sources, output_gradients)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        """The gradients of ``target`` w.r.t. ``sources`` (any nest), reduced over the process
        set; None gradients stay None. ``use_generic_names`` names the reductions ``grad_<i>``
        without name scopes (so ranks tracing under different scopes still match)."""
        grads = self._raw_gradients(target, sources, output_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads)
        reduced, _ = self._reduce(flat_grads, flat_sources, use_generic_names)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """As ``gradient()``, split: ``(local_pairs, global_pairs)``, lists of
        ``(source, gradient)`` for the local sources (not reduced) and the others (reduced)."""
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(self._raw_gradients(target, sources, output_gradients))
        reduced, is_local = self._reduce(flat_grads, flat_sources, use_generic_names)
        local_pairs = [(s, g) for s, g, loc in zip(flat_sources, reduced, is_local) if loc]
        global_pairs = [(s, g) for s, g, loc in zip(flat_sources, reduced, is_local) if not loc]
        return local_pairs, global_pairs


_TAPE_METHODS = ('_hvd_setup', 'register_local_source', '_split_local', '_reduce',
                 '_raw_gradients', 'gradient', 'get_local_and_global_gradients')


def _wrap_tape(gradtape):
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,),
               {m: _DistributedGradientTape.__dict__[m] for m in _TAPE_METHODS})
    cls._hvd_distributed = True
    tape = cls.__new__(cls)
    # Share the recording state (the underlying tape, watched variables, persistence).
    tape.__dict__.update(gradtape.__dict__)
    return tape


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps ``gradtape`` so that ``gradient()`` returns gradients reduced with ``op`` over
    ``process_set``.

    Args:
        gradtape: the ``tf.GradientTape`` (recorded already or not).
        device_dense, device_sparse: the TensorFlow device the reductions of dense and
            ``tf.IndexedSlices`` gradients run on (default: TensorFlow's placement).
        compression: ``hvd.Compression.none``, ``.fp16`` or ``.bf16`` (casts during the
            reduction), or an error-feedback compressor instance, ``hvd.PowerSGD(rank=...)`` or
            ``hvd.Int8Quantizer()`` (one per model, kept across steps; docs/compression.md).
        sparse_as_dense: reduce ``tf.IndexedSlices`` gradients as dense tensors (else they are
            gathered).
        op: ``hvd.Average`` (default), ``hvd.Sum`` or ``hvd.Adasum``.
        gradient_predivide_factor: with Average, divide by this before the sum and multiply
            after.
        num_groups: deprecated form of an integer ``groups``.
        groups: None (one group), an int (that many groups) or lists of variables.
        process_set: the ranks to reduce over.
        scale_local_gradients: divide the gradients of local sources by the set size.
    """
    groups = check_reduction_args(op, gradient_predivide_factor, num_groups, groups,
                                  compression=compression)
    tape = _wrap_tape(gradtape)
    tape._hvd_setup(device_dense, device_sparse, compression, sparse_as_dense, op,
                    gradient_predivide_factor, groups, process_set, scale_local_gradients)
    return tape


def _layer_classes():
    classes = [tf.keras.layers.Layer]
    for module in ('keras', 'tf_keras'):
        try:
            classes.append(__import__(module).layers.Layer)
        except (ImportError, AttributeError):
            pass
    return tuple(classes)


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False, op=Average,
                                   gradient_predivide_factor=1.0, num_groups=0, groups=None,
                                   process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """A ``DistributedGradientTape`` whose ``local_layers`` (a Keras layer or a list of them)
    keep local gradients: every trainable weight of those layers is registered as a local
    source. Other arguments as ``DistributedGradientTape``."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    layer_classes = _layer_classes()
    for layer in local_layers:
        if not isinstance(layer, layer_classes):
            raise ValueError('All local layers must be of tf.keras.layers.Layer type, got '
                             '{}.'.format(type(layer).__name__))
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
