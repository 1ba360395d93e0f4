// Conversion between Python arrays (anything exporting DLPack or the buffer protocol) and the
// core's TensorView/OwnedTensor, without copying.
//
// Called from the binding's entry points with the GIL held. A TensorView made by toView() points
// into the Python array's memory: the caller keeps the nb::ndarray alive until the operation
// using the view has completed (PyWork does that).
#pragma once

#include <nanobind/ndarray.h>

#include "horovod/horovod.h"

namespace hvd::py {

namespace nb = nanobind;

// Input arrays are only read: asking nanobind for read-only arrays lets producers hand out their
// cheaper unversioned DLPack capsule.
using InArray = nb::ndarray<nb::ro>;
// Arrays the engine writes into (outputs, in-place tensors).
using OutArray = nb::ndarray<>;
// Arrays handed back to Python: an object with __dlpack__/__dlpack_device__ and the buffer
// protocol, so torch.from_dlpack, np.asarray and friends wrap it without a copy.
using ResultArray = nb::ndarray<nb::array_api>;

// Checks device (CPU only in this build), dtype and C-contiguity; throws InvalidArgument with a
// message naming `what` otherwise.
template <typename Array>
TensorView toView(const Array& array, const char* what);

// The same for an unconsumed DLPack capsule ("dltensor", what torch.utils.dlpack.to_dlpack
// returns), read in place: fills `view` (reusing its shape's storage) and returns true, or returns
// false for any other object. The capsule is not consumed: the caller keeps it alive while the
// view is in use, and its own destructor releases the tensor.
bool viewOfCapsule(nb::handle capsule, TensorView& view, const char* what);

// Wraps an engine-allocated tensor; the returned array's owner keeps `tensor.storage` alive.
ResultArray toResult(const OwnedTensor& tensor);

}  // namespace hvd::py
